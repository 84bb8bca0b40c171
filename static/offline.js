// The offline page (handlers/push.go) tries again when the browser is back
// online.
window.addEventListener("online", () => location.replace("/inbox/all"));
