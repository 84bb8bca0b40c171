-- Budgets, and the runs they stopped (docs/team.md#usage-and-budgets).

-- A spending limit per day or per month (UTC), in nanodollars: for one
-- user's runs (user_id), for each user without a budget of their own for
-- the period (scope user, user_id NULL), or for every run of a skill,
-- whoever started it.
CREATE TABLE budgets (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    scope       text NOT NULL CHECK (scope IN ('user', 'skill')),
    user_id     bigint REFERENCES users (id) ON DELETE CASCADE,
    skill       text NOT NULL DEFAULT '',
    period      text NOT NULL CHECK (period IN ('day', 'month')),
    limit_nanos bigint NOT NULL CHECK (limit_nanos > 0),
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    CHECK (scope = 'user' AND skill = '' OR scope = 'skill' AND user_id IS NULL AND skill <> ''),
    UNIQUE NULLS NOT DISTINCT (scope, user_id, skill, period)
);

-- A run a budget stopped before its next model call: the thread waits (in
-- Action) while its row is here. The summary is the line the inbox shows.
-- An admin's "approve once" marks it approved and runs the thread again;
-- the step whose model call that lets through deletes it with its commit.
CREATE TABLE budget_holds (
    thread_id      bigint PRIMARY KEY REFERENCES threads (id) ON DELETE CASCADE,
    budget_id      bigint REFERENCES budgets (id) ON DELETE SET NULL,
    summary        text NOT NULL,
    spent_nanos    bigint NOT NULL,
    limit_nanos    bigint NOT NULL,
    estimate_nanos bigint NOT NULL,
    held_at        timestamptz NOT NULL DEFAULT now(),
    approved_by    bigint REFERENCES users (id) ON DELETE SET NULL,
    approved_at    timestamptz
);
