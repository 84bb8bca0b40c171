-- A run that ended (done, failed, cancelled) waits for no connection any
-- more: its waits go with it, so that a retried run does not show, or get
-- resumed by, a wait of its earlier run (jobs/connections.go).
CREATE FUNCTION pizza_connection_waits_end() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM connection_waits WHERE thread_id = NEW.id;
    RETURN NULL;
END $$;

CREATE TRIGGER threads_connection_waits_end AFTER UPDATE OF status ON threads
    FOR EACH ROW
    WHEN (NEW.status IN ('done', 'failed', 'cancelled') AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION pizza_connection_waits_end();
