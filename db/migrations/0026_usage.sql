-- Usage: what each model call cost (docs/team.md#usage-and-budgets).

-- Prices per model, in nanodollars (1e-9 USD) per million tokens, edited by
-- admins on the usage page. model is a model spec ("openai:gpt-4.1"), a
-- model id ("gpt-4.1", under any provider), or a model id after a vendor
-- prefix ("gpt-4.1" prices "openrouter:openai/gpt-4.1" too); model_cost
-- prefers the most specific. The rows below are the providers' published
-- list prices when this was written: defaults for admins to check and edit.
CREATE TABLE model_prices (
    model        text PRIMARY KEY CHECK (char_length(model) BETWEEN 1 AND 200 AND model !~ '\s'),
    input_nanos  bigint NOT NULL CHECK (input_nanos >= 0),
    output_nanos bigint NOT NULL CHECK (output_nanos >= 0),
    updated_at   timestamptz NOT NULL DEFAULT now()
);

INSERT INTO model_prices (model, input_nanos, output_nanos) VALUES
    ('gpt-5',                   1250000000, 10000000000),
    ('gpt-5-mini',               250000000,  2000000000),
    ('gpt-5-nano',                50000000,   400000000),
    ('gpt-4.1',                 2000000000,  8000000000),
    ('gpt-4.1-mini',             400000000,  1600000000),
    ('gpt-4.1-nano',             100000000,   400000000),
    ('gpt-4o',                  2500000000, 10000000000),
    ('gpt-4o-mini',              150000000,   600000000),
    ('o3',                      2000000000,  8000000000),
    ('o4-mini',                 1100000000,  4400000000),
    ('claude-opus-4-1',        15000000000, 75000000000),
    ('claude-sonnet-4-5',       3000000000, 15000000000),
    ('claude-sonnet-4-0',       3000000000, 15000000000),
    ('claude-haiku-4-5',        1000000000,  5000000000),
    ('claude-3-5-haiku-latest',  800000000,  4000000000),
    ('gemini-2.5-pro',          1250000000, 10000000000),
    ('gemini-2.5-flash',         300000000,  2500000000),
    ('gemini-2.5-flash-lite',    100000000,   400000000);

-- model_cost is what a call of the model spec with these token counts
-- costs, in nanodollars, at today's price: NULL when the model has no
-- price. The one definition of the price lookup (db/usage.go).
CREATE FUNCTION model_cost(spec text, prompt bigint, completion bigint) RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT round((prompt::numeric * p.input_nanos + completion::numeric * p.output_nanos) / 1000000)::bigint
    FROM model_prices p
    WHERE p.model IN (spec, substr(spec, strpos(spec, ':') + 1), regexp_replace(spec, '^.*[:/]', ''))
    ORDER BY p.model = spec DESC, p.model = substr(spec, strpos(spec, ':') + 1) DESC
    LIMIT 1
$$;

-- One row per model call that reported tokens, written in the transaction
-- that records its step and priced then: a price changed later does not
-- rewrite what was spent. This is the accounting, apart from steps: it
-- outlives its thread (thread_id becomes NULL), so deleting threads never
-- lowers what a user or a skill spent, nor frees budget.
CREATE TABLE model_usage (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at                timestamptz NOT NULL DEFAULT now(),
    thread_id         bigint REFERENCES threads (id) ON DELETE SET NULL,
    user_id           bigint REFERENCES users (id) ON DELETE SET NULL,
    skill             text NOT NULL DEFAULT '',
    model             text NOT NULL,
    prompt_tokens     bigint NOT NULL,
    completion_tokens bigint NOT NULL,
    cost_nanos        bigint -- NULL: the model had no price
);
-- The usage page and API aggregate a time range; a budget sums a user's or
-- a skill's calls since the start of its day or month; a thread's page sums
-- its own calls, and a step's estimate is its thread's last call.
CREATE INDEX model_usage_at_idx ON model_usage (at);
CREATE INDEX model_usage_user_idx ON model_usage (user_id, at) INCLUDE (cost_nanos);
CREATE INDEX model_usage_skill_idx ON model_usage (skill, at) INCLUDE (cost_nanos) WHERE skill <> '';
CREATE INDEX model_usage_thread_idx ON model_usage (thread_id, id);

-- The calls made before this migration, at the default prices.
INSERT INTO model_usage (at, thread_id, user_id, skill, model, prompt_tokens, completion_tokens, cost_nanos)
SELECT s.finished_at, s.thread_id, t.user_id, t.skill, s.model, s.prompt_tokens, s.completion_tokens,
       model_cost(s.model, s.prompt_tokens, s.completion_tokens)
FROM steps s JOIN threads t ON t.id = s.thread_id
WHERE s.kind = 'model' AND (s.prompt_tokens > 0 OR s.completion_tokens > 0)
ORDER BY s.id;
