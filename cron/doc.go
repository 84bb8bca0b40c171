// Package cron reads the cron expressions and IANA time zones of schedules:
// the one parser behind the schedules pages and API (triggers), the firing
// of schedules (jobs) and the schedule a SKILL.md declares (agent), so an
// expression that one of them accepts the others accept too.
//
// An expression is the standard five fields (minute hour day-of-month month
// day-of-week) or a descriptor (@hourly, @daily, @weekly, @monthly,
// @yearly, @every <duration> of at least MinEvery), read in a named zone.
// github.com/robfig/cron is the engine; the time zone database is built into
// the binary (time/tzdata), so a container image without
// /usr/share/zoneinfo still reads "Europe/Paris".
//
// The package is a leaf: it imports nothing of ours.
package cron
