// Package triggers holds the rules of the two ways a run starts by itself:
// schedules and webhooks. The handlers serve their pages and URLs and
// answer in HTTP; the rules are here.
//
// Schedules: CheckSchedule cleans and validates a schedule a person
// submits (its expression and zone read by package cron, its skill among
// the skills of now) and computes its next due time; PreviewFires and
// NextFires show when it fires. Firing due schedules is the job of
// jobs.ScheduleWorker.
//
// Webhooks: NewToken makes a webhook's token (only its SHA-256 is stored)
// and seals its signing secret under a key derived from the token, so the
// database alone holds neither. A Receiver takes a delivery: it finds the
// token's webhook, verifies the Standard Webhooks or GitHub signature,
// checks the body, and in one transaction claims the delivery's id and
// starts the run (jobs.Runtime.StartTx), so concurrent redeliveries start
// one run. It returns a Result, or a *Refusal of a Kind; every delivery to
// a known webhook is recorded with the HTTP status the handler chose for
// its kind (Config.Status).
//
// triggers imports db, cron, agent (skills) and jobs (run starts); never
// handlers or views.
package triggers
