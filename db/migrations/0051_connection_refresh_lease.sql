-- A token refresh is claimed with a lease (connections.Service.Token): the
-- replica that sets refreshing_until refreshes over HTTP with no
-- transaction open, then saves the rotated tokens and clears the lease in
-- one statement. A racer waits for the lease to clear (or to run out, when
-- the refresher died) and reads again. One refresh per user and server.
ALTER TABLE connections ADD COLUMN refreshing_until timestamptz;
