-- A run can wait for its user's own ${user:NAME} value of a server rather
-- than an OAuth sign-in (docs/mcp.md): secret is the NAME it waits for,
-- never the value; '' for a sign-in. The API's waiting item and the
-- thread's summary say it.
ALTER TABLE connection_waits ADD COLUMN secret text NOT NULL DEFAULT '';
