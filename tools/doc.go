// Package tools holds the tools a run can call and the Toolbox that offers
// them: the scratch files and ask_user (tools.go), the task tool's spec
// (task.go; the run service runs it), long-term memory (memory.go),
// attachments and PDFs (attach.go, pdf.go, images.go), host folder grants
// (grants.go), the JavaScript sandbox and its bridge to the other tools
// (sandbox.go) and a skill's own files (skills.go).
//
// A tool is called with a Run: the thread and user it works for, the call
// being executed and the Host, the run service's side (its pools, commits
// under the step's lease, the gate, the run's skills). Nothing reaches a
// tool through its context. Tx tools run inside the transaction that records
// their result; Call tools act outside the database and never hold one.
package tools
