package db

// SearchQueryAll and SearchQueryAny show a parsed query's tsquery texts to
// the package's external tests.
func SearchQueryAll(q SearchQuery) string { return q.all }
func SearchQueryAny(q SearchQuery) string { return q.any }

// ActiveAllowRulesSQL is the per-call allow rule look-up, for its plan.
const ActiveAllowRulesSQL = activeAllowRulesSQL
