package views

// SignIn is the sign-in page: where to go after, and why the last attempt
// failed, if it did.
type SignIn struct {
	// Next is the local URL to return to once signed in.
	Next string
	// Error says why a sign-in was refused; empty on a first visit.
	Error string
	// SignedOut is set right after signing out.
	SignedOut bool
}
