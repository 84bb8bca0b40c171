// Package jobs holds the River jobs that run agent steps and schedules: each
// file is one job's arguments and worker.
package jobs
