-- How many times in a row the step of a run at generation step_timeouts_gen
-- ran out of time (jobs: StepWorker), with step_timeouts_done of the
-- thread's tool calls done: the third such timeout fails the run instead of
-- handing the step to a new job once more. A later generation, or a call
-- finished since, starts the count again.
ALTER TABLE threads
    ADD COLUMN step_timeouts      int    NOT NULL DEFAULT 0,
    ADD COLUMN step_timeouts_gen  bigint NOT NULL DEFAULT 0,
    ADD COLUMN step_timeouts_done bigint NOT NULL DEFAULT 0;
-- The new columns are news too (0017): a timeout is rare, and says so.
SELECT pizza_threads_news_trigger();
