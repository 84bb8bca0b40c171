-- Issue 12: admin rights recomputed from what the identity provider said,
-- tokens that expire and carry their own admin scope.

-- What the last sign-in's ID token said, kept so that the admin role can be
-- recomputed at start-up against the configuration of the day (a person
-- removed from PIZZA_ADMIN_EMAILS or from the admin group loses the role at
-- the next start, not at their next sign-in, which may never come):
--   email_verified  the token said email_verified: true (a missing claim is
--                   false: Entra ID never sends it)
--   admin_group     the configured admin group, when the groups claim held
--                   it; '' otherwise
-- Existing users have neither until they sign in again: an admin by config
-- loses the role at the first start-up after this migration and regains it
-- at their next sign-in if the provider still vouches for it. Admins made
-- on the settings page (granted_admin) keep it.
ALTER TABLE users
    ADD COLUMN email_verified boolean NOT NULL DEFAULT false,
    ADD COLUMN admin_group    text NOT NULL DEFAULT '';

-- A token acts as its user, but as an admin only with the admin scope,
-- chosen at creation by an admin, and only while its user is an admin.
ALTER TABLE api_tokens ADD COLUMN admin boolean NOT NULL DEFAULT false;

-- Every token expires. Tokens made to never expire get the default lifetime
-- from now, so no script stops working on the day of the upgrade; start-up
-- also shortens any token past PIZZA_TOKEN_MAX_TTL.
UPDATE api_tokens SET expires_at = now() + interval '90 days' WHERE expires_at IS NULL;
ALTER TABLE api_tokens ALTER COLUMN expires_at SET NOT NULL;
