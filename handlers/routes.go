package handlers

import "net/http"

// routes is the table of contents of the web interface.
func (h *Handler) routes(mux *http.ServeMux) {
	// Open to anyone: probes and assets.
	mux.Handle("GET /healthz", h.handle(h.healthz))
	mux.Handle("GET /readyz", h.handle(h.readyz))
	mux.Handle("GET /static/{hash}/{path...}", h.handle(h.serveStatic))
	// The installable app (push.go): its manifest, service worker (at the
	// root, so its scope is the whole app) and offline page, open to anyone.
	mux.Handle("GET /manifest.webmanifest", h.handle(h.manifest))
	mux.Handle("GET /sw.js", h.handle(h.serveWorker))
	mux.Handle("GET /offline", h.handle(h.offline))

	// The inbox: a queue, narrowed with ?folder=ID and ?trigger=KIND,
	// paginated with ?after=CURSOR.
	toInbox := http.RedirectHandler("/inbox/all", http.StatusFound)
	mux.Handle("GET /{$}", toInbox)
	mux.Handle("GET /inbox", toInbox)
	mux.Handle("GET /inbox/{$}", toInbox)
	mux.Handle("GET /inbox/{queue}", h.page(h.listQueue))

	// Threads.
	mux.Handle("GET /threads/new", h.page(h.composeForm))
	// Starting a run passes admission control first (admission.go): a
	// saturated server answers 503, a user over their rate 429.
	mux.Handle("POST /threads", h.admitStart(h.page(h.createThread)))
	mux.Handle("GET /threads/{id}", h.page(h.showThread))
	mux.Handle("POST /threads/bulk", h.page(h.bulkAction))
	mux.Handle("POST /threads/{id}/read", h.page(h.markRead))
	mux.Handle("POST /threads/{id}/unread", h.page(h.markUnread))
	mux.Handle("POST /threads/{id}/archive", h.page(h.archive))
	mux.Handle("POST /threads/{id}/unarchive", h.page(h.unarchive))
	mux.Handle("POST /threads/{id}/move", h.page(h.moveThread))
	mux.Handle("POST /threads/{id}/delete", h.page(h.deleteThread))

	// A thread's run, from its page (runs.go): decisions on the calls it
	// waits at, a reply once it has ended, cancel and retry.
	// A waiting thread's row in a listing opens the same decision form in
	// place (GET, a fragment); a decision posted from there answers with
	// the row in its new state.
	mux.Handle("GET /threads/{id}/decisions", h.page(h.decisionForm))
	mux.Handle("POST /threads/{id}/decisions", h.page(h.decide))
	// Alike calls of threads selected in Action, decided together
	// (decisions_bulk.go).
	mux.Handle("GET /decisions/review", h.page(h.reviewDecisions))
	mux.Handle("POST /decisions", h.page(h.decideTogether))
	mux.Handle("POST /threads/{id}/messages", h.page(h.reply))
	mux.Handle("POST /threads/{id}/cancel", h.page(h.cancelRun))
	mux.Handle("POST /threads/{id}/retry", h.page(h.retryRun))

	// Sub-agents (activity.go; docs/subagents.md): a decision on a
	// call a sub-agent waits at, from its parent's page, which it answers.
	mux.Handle("POST /threads/{id}/subagents/{child}/decisions", h.page(h.decideSubagent))

	// Live updates (events.go): the signed-in user's event stream, for the
	// page named by ?list= or ?thread=, resuming at ?since= or Last-Event-ID.
	mux.Handle("GET /events", h.page(h.events))

	// Folders. A folder's threads are listed at /inbox/{queue}?folder=ID.
	mux.Handle("GET /folders", h.page(h.listFolders))
	mux.Handle("POST /folders", h.page(h.createFolder))
	mux.Handle("POST /folders/{id}/rename", h.page(h.renameFolder))
	mux.Handle("POST /folders/{id}/delete", h.page(h.deleteFolder))
	// Sharing a folder with people or a group (shares.go; docs/team.md).
	mux.Handle("POST /folders/{id}/shares", h.page(h.shareFolder))
	mux.Handle("POST /folders/{id}/shares/{share}/delete", h.page(h.unshareFolder))
	// A folder's chat webhooks (folder_webhooks.go; listed and removed by
	// a person's handlers, notifications.go; docs/notifications.md).
	mux.Handle("POST /folders/{id}/webhooks", h.page(h.addFolderWebhook))
	mux.Handle("POST /folders/{id}/webhooks/{hook}/delete", h.page(h.deleteWebhookForm))

	// The agent's workspace (memory.go, attachments.go, grants.go;
	// docs/workspace.md): the user's long-term memories, their
	// attachments' downloads (another user's is a 404), and the admins'
	// folder grants.
	mux.Handle("GET /memory", h.page(h.showMemory))
	mux.Handle("POST /memory", h.page(h.createMemory))
	mux.Handle("POST /memory/{id}", h.page(h.updateMemory))
	mux.Handle("POST /memory/{id}/delete", h.page(h.deleteMemory))
	// "Allow from now on" rules (allowrules.go).
	mux.Handle("GET /allow-rules", h.page(h.showAllowRules))
	mux.Handle("POST /allow-rules/{id}/revoke", h.page(h.revokeAllowRule))
	mux.Handle("GET /api/v1/allow-rules", h.api(h.apiAllowRules))
	mux.Handle("POST /api/v1/allow-rules/{id}/revoke", h.api(h.apiRevokeAllowRule))
	mux.Handle("GET /attachments/{id}", h.page(h.downloadAttachment))
	mux.Handle("GET /settings/grants", h.admin(h.showGrants))
	mux.Handle("POST /settings/grants", h.admin(h.addGrant))
	mux.Handle("POST /settings/grants/{id}/writable", h.admin(h.setGrantWritable))
	mux.Handle("POST /settings/grants/{id}/delete", h.admin(h.deleteGrant))

	// The JSON API (api.go, api_threads.go; docs/api.md), whose requests
	// and answers are the types of package apiv1. Errors are
	// {"error": "..."}; reading a thread here does not mark it read.
	mux.Handle("POST /api/v1/threads", h.admitStart(h.api(h.apiCreateThread)))
	mux.Handle("GET /api/v1/threads", h.api(h.apiListThreads))
	mux.Handle("GET /api/v1/threads/{id}", h.api(h.apiShowThread))
	mux.Handle("DELETE /api/v1/threads/{id}", h.api(h.apiDeleteThread))
	mux.Handle("POST /api/v1/threads/{id}/decisions", h.api(h.apiDecide))
	mux.Handle("POST /api/v1/decisions", h.api(h.apiDecideEach))
	mux.Handle("GET /api/v1/folders/{id}/shares", h.api(h.apiListShares))
	mux.Handle("POST /api/v1/folders/{id}/shares", h.api(h.apiShareFolder))
	mux.Handle("DELETE /api/v1/folders/{id}/shares/{share}", h.api(h.apiUnshareFolder))
	mux.Handle("GET /api/v1/folders/{id}/webhooks", h.api(h.apiListWebhooks))
	mux.Handle("POST /api/v1/folders/{id}/webhooks", h.api(h.apiAddFolderWebhook))
	mux.Handle("DELETE /api/v1/folders/{id}/webhooks/{hook}", h.api(h.apiDeleteWebhook))
	mux.Handle("POST /api/v1/threads/{id}/messages", h.api(h.apiReply))
	mux.Handle("POST /api/v1/threads/{id}/cancel", h.api(h.apiCancel))
	mux.Handle("POST /api/v1/threads/{id}/retry", h.api(h.apiRetry))
	mux.Handle("POST /api/v1/threads/{id}/read", h.api(h.apiMarkRead))
	mux.Handle("POST /api/v1/threads/{id}/unread", h.api(h.apiMarkUnread))
	mux.Handle("POST /api/v1/threads/{id}/archive", h.api(h.apiArchive))
	mux.Handle("POST /api/v1/threads/{id}/unarchive", h.api(h.apiUnarchive))
	// The API's event stream (api_events.go): JSON about the user's
	// threads, resuming at Last-Event-ID like GET /events.
	mux.Handle("GET /api/v1/events", h.api(h.apiEvents))
	// Web Push subscriptions, the user's own (push.go).
	mux.Handle("POST /api/v1/push/subscriptions", h.api(h.apiSubscribePush))
	mux.Handle("GET /api/v1/push/subscriptions", h.api(h.apiListPush))
	mux.Handle("DELETE /api/v1/push/subscriptions", h.api(h.apiDeletePush))
	// Notifications, the user's own (notifications.go): preferences, the
	// e-mail address entered and confirmed, chat webhooks, and what was
	// delivered (everyone's, for an admin, with ?all=1).
	mux.Handle("GET /api/v1/notifications/preferences", h.api(h.apiGetNotificationPrefs))
	mux.Handle("PUT /api/v1/notifications/preferences", h.api(h.apiPutNotificationPrefs))
	mux.Handle("POST /api/v1/notifications/email", h.api(h.apiStartEmail))
	mux.Handle("POST /api/v1/notifications/email/confirm", h.api(h.apiConfirmEmail))
	mux.Handle("GET /api/v1/notifications/webhooks", h.api(h.apiListWebhooks))
	mux.Handle("POST /api/v1/notifications/webhooks", h.api(h.apiAddWebhook))
	mux.Handle("DELETE /api/v1/notifications/webhooks/{id}", h.api(h.apiDeleteWebhook))
	mux.Handle("GET /api/v1/notifications/deliveries", h.api(h.apiListDeliveries))
	// What the agents cost (api_usage.go), for admins only: 403 otherwise.
	mux.Handle("GET /api/v1/usage", h.adminAPI(h.apiShowUsage))
	// The API's OpenAPI document (docs/openapi.json), open to anyone.
	mux.Handle("GET /api/v1/openapi.json", h.handle(h.apiOpenAPI))
	mux.Handle("/api/v1/", h.apiNotFound(mux))

	// Sign-in (oidc.go): open to anyone, mounted when SSO is configured.
	// The identity provider sends the browser back to /auth/callback.
	if h.auth.SignInEnabled() {
		mux.Handle("GET /signin", h.handle(h.showSignIn))
		mux.Handle("GET /auth/login", h.handle(h.startSignIn))
		mux.Handle("GET /auth/callback", h.handle(h.finishSignIn))
		mux.Handle("POST /auth/signout", h.handle(h.signOut))
	}

	// Personal access tokens for the API (tokens.go), the user's own.
	mux.Handle("GET /tokens", h.page(h.listTokens))
	mux.Handle("POST /tokens", h.page(h.createToken))
	mux.Handle("POST /tokens/{id}/revoke", h.page(h.revokeToken))
	// What the user is told, when and where (notifications.go).
	mux.Handle("GET /notifications", h.page(h.showNotifications))
	mux.Handle("POST /notifications/preferences", h.page(h.saveNotificationPrefs))
	mux.Handle("POST /notifications/email", h.page(h.startEmailForm))
	mux.Handle("POST /notifications/email/confirm", h.page(h.confirmEmailForm))
	mux.Handle("POST /notifications/email/delete", h.page(h.deleteEmailForm))
	mux.Handle("POST /notifications/webhooks", h.page(h.addWebhookForm))
	mux.Handle("POST /notifications/webhooks/{id}/delete", h.page(h.deleteWebhookForm))
	// The devices that get the user's push notifications (push.go).
	mux.Handle("GET /devices", h.page(h.listDevices))
	mux.Handle("POST /devices/{id}/delete", h.page(h.deleteDevice))

	// Each user's own sign-ins to MCP servers (connections.go;
	// docs/mcp.md). The authorization server sends the browser back to
	// /connect/callback; the metadata document is open to anyone.
	mux.Handle("GET /connections", h.page(h.showConnections))
	mux.Handle("POST /connections/{server}/delete", h.page(h.disconnect))
	mux.Handle("POST /connections/{server}/secrets/{name}", h.page(h.setSecret))
	mux.Handle("POST /connections/{server}/secrets/{name}/delete", h.page(h.deleteSecret))
	mux.Handle("GET /connect/callback", h.page(h.finishConnect))
	mux.Handle("GET /connect/{server}", h.page(h.startConnect))
	mux.Handle("GET /oauth/client-metadata.json", h.handle(h.clientMetadata))
	mux.Handle("GET /api/v1/connections", h.api(h.apiListConnections))
	mux.Handle("DELETE /api/v1/connections/{server}", h.api(h.apiDeleteConnection))
	mux.Handle("PUT /api/v1/connections/{server}/secrets/{name}", h.api(h.apiPutSecret))
	mux.Handle("DELETE /api/v1/connections/{server}/secrets/{name}", h.api(h.apiDeleteSecret))

	// Admin settings (settings.go): a member gets a 404. MCP servers
	// (/settings/mcp) and folder grants (/settings/grants) use h.admin too.
	mux.Handle("GET /settings", h.admin(h.showSettings))
	mux.Handle("POST /settings/providers/{name}", h.admin(h.saveProvider))
	mux.Handle("POST /settings/providers/{name}/reset", h.admin(h.resetProvider))
	mux.Handle("POST /settings/providers/{name}/test", h.admin(h.testProvider))
	mux.Handle("POST /settings/model", h.admin(h.saveDefaultModel))
	mux.Handle("POST /settings/context-windows", h.admin(h.saveContextWindows))
	mux.Handle("POST /settings/tool-policy", h.admin(h.saveToolPolicy))
	mux.Handle("POST /settings/origins", h.admin(h.addOrigin))
	mux.Handle("POST /settings/origins/delete", h.admin(h.deleteOrigin))
	mux.Handle("POST /settings/users/{id}/admin", h.admin(h.setUserAdmin))
	mux.Handle("POST /settings/users/{id}/disable", h.admin(h.setUserDisabled))
	mux.Handle("POST /settings/users/{id}/end-sessions", h.admin(h.endUserSessions))
	mux.Handle("GET /settings/skills/new", h.admin(h.newSkill))
	mux.Handle("GET /settings/skills/{name}/edit", h.admin(h.editSkill))
	mux.Handle("POST /settings/skills", h.admin(h.saveSkill))
	mux.Handle("POST /settings/skills/install", h.admin(h.installSkills))
	mux.Handle("POST /settings/skills/{name}/delete", h.admin(h.deleteSkill))
	// Usage and budgets (usage.go, api_usage.go; docs/team.md): what the
	// agents cost, budgets, prices per model, and the runs a budget
	// stopped, which an admin may let make one more model call.
	mux.Handle("GET /settings/usage", h.admin(h.showUsage))
	mux.Handle("POST /settings/usage/budgets", h.admin(h.saveBudget))
	mux.Handle("POST /settings/usage/budgets/{id}/delete", h.admin(h.deleteBudget))
	mux.Handle("POST /settings/usage/prices", h.admin(h.savePrice))
	mux.Handle("POST /settings/usage/prices/delete", h.admin(h.deletePrice))
	mux.Handle("POST /settings/usage/holds/{id}/approve", h.admin(h.approveBudgetOnce))
	if h.jobsUI != nil {
		// River's UI and its JSON API, under its own prefix.
		mux.Handle("/settings/jobs/", h.adminHandler(h.jobsUI))
	}

	// MCP servers and plugins (mcp.go; docs/mcp.md), admins only.
	// Servers come from .mcp.json, this page and plugins; any can be turned
	// off and tested, those of this page edited and deleted.
	mux.Handle("GET /settings/mcp", h.admin(h.showMCP))
	mux.Handle("POST /settings/mcp", h.admin(h.createMCPServer))
	mux.Handle("POST /settings/mcp-probe", h.admin(h.probeMCPForm))
	mux.Handle("GET /settings/mcp/{name}/edit", h.admin(h.editMCPServer))
	mux.Handle("POST /settings/mcp/{name}/edit", h.admin(h.updateMCPServer))
	mux.Handle("POST /settings/mcp/{name}/delete", h.admin(h.deleteMCPServer))
	mux.Handle("POST /settings/mcp/{name}/enabled", h.admin(h.setMCPServerEnabled))
	mux.Handle("POST /settings/mcp/{name}/restart", h.admin(h.restartMCPServer))
	mux.Handle("POST /settings/mcp/{name}/test", h.admin(h.testMCPServer))
	mux.Handle("GET /settings/plugins", h.admin(h.showPlugins))
	mux.Handle("POST /settings/plugins", h.admin(h.installPlugin))
	mux.Handle("POST /settings/plugins/{name}/enabled", h.admin(h.setPluginEnabled))
	mux.Handle("POST /settings/plugins/{name}/delete", h.admin(h.uninstallPlugin))

	// Runs that start themselves (schedules.go, webhooks.go;
	// docs/triggers.md). Schedules fire from jobs.ScheduleWorker.
	mux.Handle("GET /schedules", h.page(h.listSchedules))
	mux.Handle("GET /schedules/new", h.page(h.newScheduleForm))
	mux.Handle("GET /schedules/preview", h.page(h.schedulePreview))
	mux.Handle("POST /schedules", h.page(h.createSchedule))
	mux.Handle("GET /schedules/{id}", h.page(h.showSchedule))
	mux.Handle("POST /schedules/{id}", h.page(h.updateSchedule))
	mux.Handle("POST /schedules/{id}/pause", h.page(h.pauseSchedule))
	mux.Handle("POST /schedules/{id}/resume", h.page(h.resumeSchedule))
	mux.Handle("POST /schedules/{id}/delete", h.page(h.deleteSchedule))
	mux.Handle("GET /api/v1/schedules", h.api(h.apiListSchedules))
	mux.Handle("POST /api/v1/schedules", h.api(h.apiCreateSchedule))
	mux.Handle("GET /api/v1/schedules/{id}", h.api(h.apiShowSchedule))
	mux.Handle("PATCH /api/v1/schedules/{id}", h.api(h.apiUpdateSchedule))
	mux.Handle("DELETE /api/v1/schedules/{id}", h.api(h.apiDeleteSchedule))
	mux.Handle("GET /webhooks", h.page(h.listWebhooks))
	mux.Handle("GET /webhooks/{skill}", h.page(h.showWebhook))
	mux.Handle("POST /webhooks/{skill}", h.page(h.setWebhook))
	mux.Handle("POST /webhooks/{skill}/revoke", h.page(h.revokeWebhook))
	// A webhook's URL, every method (405 but for POST). It authenticates by
	// the token in its path, not by a session: it is deliberately not
	// h.page, and it must stay outside the origin check (protectOrigin),
	// since the systems that call it are not browsers of ours. It answers
	// JSON, and hides the token from the request log.
	mux.Handle("/hooks/{skill}/{token}", h.countHook(h.admitStart(http.HandlerFunc(h.receiveHook))))
	mux.Handle("/hooks/", http.HandlerFunc(h.noHook))

	// Anything else is a 404 page, with the sidebar when signed in.
	mux.Handle("/", h.page(func(http.ResponseWriter, *http.Request) error {
		return httpError{http.StatusNotFound, "This page does not exist."}
	}))
}
