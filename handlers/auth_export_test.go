package handlers

import (
	"net/http"

	"github.com/gorilla/securecookie"
	"github.com/gorilla/sessions"
)

// FlowCookieForTest makes the sign-in flow cookie a browser would hold,
// with any content: it stands in for a client that lost part of its flow
// (a missing PKCE verifier), which no outsider could forge.
func (a *Auth) FlowCookieForTest(state, nonce, verifier string) (*http.Cookie, error) {
	v := map[any]any{flowState: state, flowNonce: nonce, flowVerifier: verifier, flowNext: "/inbox/all"}
	enc, err := securecookie.EncodeMulti(a.flowName, v, a.store.Codecs...)
	if err != nil {
		return nil, err
	}
	return sessions.NewCookie(a.flowName, enc, a.cookieOptions(flowMaxAge)), nil
}
