-- Compactions: the summaries that stand, in the conversation a run sends its
-- model, for the older messages of its thread (docs/context.md). The
-- messages themselves stay: the page and the API show the whole
-- transcript. A compaction replaces the messages after the task up to
-- through_message_id (and any earlier compaction, which its summary takes
-- in); the latest one is the one a step uses. One summary per range: a
-- step that finds its range already summarized uses that summary.
CREATE TABLE compactions (
    id                 bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    thread_id          bigint NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    first_message_id   bigint NOT NULL,
    through_message_id bigint NOT NULL,
    summary            text NOT NULL,
    model              text NOT NULL,
    -- tokens_before is the estimated context the run had when it
    -- compacted, tokens_after what it sends with the summary instead.
    tokens_before      bigint NOT NULL DEFAULT 0,
    tokens_after       bigint NOT NULL DEFAULT 0,
    created_at         timestamptz NOT NULL DEFAULT now(),
    UNIQUE (thread_id, through_message_id),
    CHECK (first_message_id <= through_message_id)
);

-- The context windows providers taught by refusing a request as too long
-- ("maximum context length is 65536 tokens"), per model spec: a window is
-- only ever lowered by them.
CREATE TABLE model_windows (
    model      text PRIMARY KEY,
    tokens     bigint NOT NULL CHECK (tokens > 0),
    updated_at timestamptz NOT NULL DEFAULT now()
);
