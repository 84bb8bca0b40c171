-- Usage by kind (docs/team.md#usage-and-budgets): a model call's tokens are
-- input (prompt_tokens, uncached), output (completion_tokens, reasoning
-- included), cache reads, cache writes, and, inside the output, reasoning.
-- Each kind but reasoning has its own price; reasoning is priced as the
-- output it is part of, never twice.

ALTER TABLE steps
    ADD COLUMN cache_read_tokens  bigint NOT NULL DEFAULT 0,
    ADD COLUMN cache_write_tokens bigint NOT NULL DEFAULT 0,
    ADD COLUMN reasoning_tokens   bigint NOT NULL DEFAULT 0;

ALTER TABLE model_usage
    ADD COLUMN cache_read_tokens  bigint NOT NULL DEFAULT 0,
    ADD COLUMN cache_write_tokens bigint NOT NULL DEFAULT 0,
    ADD COLUMN reasoning_tokens   bigint NOT NULL DEFAULT 0;

-- Cache prices per million tokens, in nanodollars. NULL derives them from
-- the input price by Anthropic's published rule: a cache read costs 10% of
-- the input price, a cache write (5-minute cache) 125%. OpenAI, Gemini and
-- Bedrock's Nova charge nothing extra to write a cache, and read it at 10%
-- to 50% of the input price depending on the model: the rows below set
-- those the providers publish; an admin sets any other on the usage page.
ALTER TABLE model_prices
    ADD COLUMN cache_read_nanos  bigint CHECK (cache_read_nanos >= 0),
    ADD COLUMN cache_write_nanos bigint CHECK (cache_write_nanos >= 0);

-- OpenAI's cached input, from its price page; writes cost the input price.
UPDATE model_prices SET cache_write_nanos = input_nanos, cache_read_nanos = CASE model
        WHEN 'gpt-5'        THEN 125000000
        WHEN 'gpt-5-mini'   THEN  25000000
        WHEN 'gpt-5-nano'   THEN   5000000
        WHEN 'gpt-4.1'      THEN 500000000
        WHEN 'gpt-4.1-mini' THEN 100000000
        WHEN 'gpt-4.1-nano' THEN  25000000
        WHEN 'gpt-4o'       THEN 1250000000
        WHEN 'gpt-4o-mini'  THEN  75000000
        WHEN 'o3'           THEN 500000000
        WHEN 'o4-mini'      THEN 275000000
    END
WHERE model IN ('gpt-5', 'gpt-5-mini', 'gpt-5-nano', 'gpt-4.1', 'gpt-4.1-mini', 'gpt-4.1-nano',
                'gpt-4o', 'gpt-4o-mini', 'o3', 'o4-mini');

-- Gemini's implicit caching reads at 10% of the input price and charges no
-- write.
UPDATE model_prices SET cache_write_nanos = input_nanos
WHERE model IN ('gemini-2.5-pro', 'gemini-2.5-flash', 'gemini-2.5-flash-lite');

-- Models of issue 26 whose list prices are published: Gemini 3 Pro
-- (preview, prompts up to 200k tokens) and Amazon Nova Pro on Bedrock
-- (on demand; cached reads at a 75% discount). An existing row (an
-- admin's) is kept.
INSERT INTO model_prices (model, input_nanos, output_nanos, cache_read_nanos, cache_write_nanos) VALUES
    ('gemini-3-pro-preview', 2000000000, 12000000000, 200000000, 2000000000),
    ('amazon.nova-pro-v1:0',  800000000,  3200000000, 200000000,  800000000)
ON CONFLICT (model) DO NOTHING;

-- model_cost prices each kind at its own price: the one definition of the
-- price lookup (db/usage.go). NULL when the model has no price.
DROP FUNCTION model_cost(text, bigint, bigint);
CREATE FUNCTION model_cost(spec text, prompt bigint, completion bigint, cache_read bigint, cache_write bigint) RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT round((prompt::numeric * p.input_nanos
                + completion::numeric * p.output_nanos
                + cache_read::numeric * coalesce(p.cache_read_nanos, p.input_nanos * 0.1)
                + cache_write::numeric * coalesce(p.cache_write_nanos, p.input_nanos * 1.25)) / 1000000)::bigint
    FROM model_prices p
    WHERE p.model IN (spec, substr(spec, strpos(spec, ':') + 1), regexp_replace(spec, '^.*[:/]', ''))
    ORDER BY p.model = spec DESC, p.model = substr(spec, strpos(spec, ':') + 1) DESC
    LIMIT 1
$$;
