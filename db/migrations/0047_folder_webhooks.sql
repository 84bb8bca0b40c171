-- Chat webhooks of a folder (docs/notifications.md, issue 32): its owner
-- connects them; events about the folder's threads are posted to them once,
-- however many people are told.
--
-- A folder's webhook is a row of notification_webhooks with folder_id set
-- (user_id: the owner who connected it); a person's own have none.
ALTER TABLE notification_webhooks ADD COLUMN folder_id bigint REFERENCES folders (id) ON DELETE CASCADE;
CREATE INDEX notification_webhooks_folder ON notification_webhooks (folder_id, kind) WHERE folder_id IS NOT NULL;

-- Its deliveries are recorded under the webhook's owner with the folder
-- named, and carry their own copy of the event (no person's event row:
-- the folder's copy is the same for every person told). No foreign key:
-- the record outlives the folder, as a person's outlives their webhook.
ALTER TABLE notification_deliveries ADD COLUMN folder_id bigint, ADD COLUMN event jsonb;
