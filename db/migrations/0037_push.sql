-- Web Push (docs/notifications.md): the server's VAPID key pair, one for
-- every replica (created once: the first INSERT wins, everyone reads the
-- winner), unless PIZZA_VAPID_PRIVATE_KEY gives it; and each person's push
-- subscriptions, one per browser or device.
CREATE TABLE vapid_keys (
    id          smallint PRIMARY KEY DEFAULT 1 CHECK (id = 1),
    private_key text NOT NULL,
    public_key  text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE push_subscriptions (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id    bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    -- endpoint is the push service's URL for this browser; p256dh and auth
    -- are the browser's keys (base64url, RFC 8291).
    endpoint   text NOT NULL,
    p256dh     text NOT NULL,
    auth       text NOT NULL,
    -- label names the device for the settings page (from its user agent).
    label      text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (user_id, endpoint)
);
CREATE INDEX push_subscriptions_user ON push_subscriptions (user_id);
