package handlers

import (
	"errors"
	"net/http"
	"net/url"
	"slices"

	"pizzabot/connections"
	"pizzabot/db"
	"pizzabot/refusal"
	"pizzabot/views"
)

// Each person's own sign-ins to MCP servers (docs/mcp.md): the Connections
// page, GET/DELETE /api/v1/connections, /connect/{server} to the
// authorization server and /connect/callback back. Every query is the
// signed-in user's.

// errNoConnections answers when the server keeps no connections (no key to
// seal tokens with).
var errNoConnections = httpError{http.StatusNotFound, "Connections are not enabled on this server (PIZZA_SECRET_KEY)."}

// showConnections lists the servers people sign in to, with the user's
// connection to each.
func (h *Handler) showConnections(w http.ResponseWriter, r *http.Request) error {
	return h.renderConnections(w, r, http.StatusOK, "")
}

func (h *Handler) renderConnections(w http.ResponseWriter, r *http.Request, status int, msg string) error {
	ret := r.URL.Query().Get("return")
	if r.Method == http.MethodPost {
		ret = r.PostFormValue("return")
	}
	if !connections.LocalPath(ret) {
		ret = ""
	}
	ctx := r.Context()
	user := userFrom(ctx)
	nav, err := h.loadNav(ctx, r, user)
	if err != nil {
		return err
	}
	p := views.Connections{Nav: nav, Now: h.now(), Error: msg, Unavailable: h.conns == nil}
	if h.conns != nil {
		conns, err := h.conns.List(ctx, user.ID)
		if err != nil {
			return err
		}
		names := h.conns.Names(ctx)
		for _, c := range conns {
			if !slices.Contains(names, c.Server) {
				names = append(names, c.Server) // a server removed since: Disconnect stays offered
			}
		}
		entered, err := h.conns.EnteredSecrets(ctx, user.ID)
		if err != nil {
			return err
		}
		slices.Sort(names)
		for _, n := range names {
			row := views.ConnectionRow{Server: n, OAuth: true, Return: ret}
			if srv, err := h.conns.Server(ctx, n); err == nil {
				row.OAuth = srv.SignIn()
				for _, name := range srv.Secrets {
					f := views.SecretField{Name: name}
					for i := range entered {
						if entered[i].Server == n && entered[i].Name == name {
							f.Entered = &entered[i].UpdatedAt
						}
					}
					row.Secrets = append(row.Secrets, f)
				}
			}
			for i := range conns {
				if conns[i].Server == n {
					row.Conn = &conns[i]
				}
			}
			p.Servers = append(p.Servers, row)
		}
	}
	return h.render(w, r, status, views.ConnectionsPage(p))
}

// disconnect revokes and deletes the user's connection, from the page.
func (h *Handler) disconnect(w http.ResponseWriter, r *http.Request) error {
	if h.conns == nil {
		return errNoConnections
	}
	err := h.conns.Disconnect(r.Context(), userFrom(r.Context()).ID, r.PathValue("server"))
	if errors.Is(err, db.ErrNotFound) {
		return notFound
	}
	if err != nil {
		// Deleted here, the server's revocation failed: say so.
		h.log.WarnContext(r.Context(), "revoke a connection", "server", r.PathValue("server"), "err", err)
		return h.renderConnections(w, r, http.StatusOK, "Disconnected here; the server did not confirm the revocation, so revoke Pizza Bot's access in its settings too.")
	}
	http.Redirect(w, r, "/connections", http.StatusSeeOther)
	return nil
}

// startConnect sends the signed-in browser to server's authorization
// server; ?return= is where the callback sends it back (a local path),
// ?scope= widens what is asked for (a step-up).
func (h *Handler) startConnect(w http.ResponseWriter, r *http.Request) error {
	if h.conns == nil {
		return errNoConnections
	}
	ret := r.URL.Query().Get("return")
	if !connections.LocalPath(ret) {
		ret = "/connections"
	}
	if srv, err := h.conns.Server(r.Context(), r.PathValue("server")); err == nil && !srv.SignIn() {
		// A server that takes the user's own values, not a sign-in: to
		// the form that enters them, which returns to ret.
		http.Redirect(w, r, "/connections?return="+url.QueryEscape(ret)+"#connection-"+srv.Name, http.StatusFound)
		return nil
	}
	to, err := h.conns.Begin(r.Context(), userFrom(r.Context()).ID, r.PathValue("server"), ret, r.URL.Query().Get("scope"))
	if err != nil {
		h.log.WarnContext(r.Context(), "start a connection", "server", r.PathValue("server"), "err", err)
		return h.renderConnections(w, r, http.StatusBadGateway, "Cannot connect "+r.PathValue("server")+": "+err.Error())
	}
	http.Redirect(w, r, to, http.StatusFound)
	return nil
}

// finishConnect is the authorization server's redirect back: it checks
// state, exchanges the code and returns the person where they started.
func (h *Handler) finishConnect(w http.ResponseWriter, r *http.Request) error {
	if h.conns == nil {
		return errNoConnections
	}
	q := r.URL.Query()
	if e := q.Get("error"); e != "" {
		return h.renderConnections(w, r, http.StatusBadRequest, "The sign-in was not completed: "+e+" "+q.Get("error_description"))
	}
	_, ret, err := h.conns.Finish(r.Context(), userFrom(r.Context()).ID, q.Get("state"), q.Get("code"))
	if errors.Is(err, connections.ErrBadState) {
		return h.renderConnections(w, r, http.StatusBadRequest, err.Error())
	}
	if err != nil {
		h.log.WarnContext(r.Context(), "finish a connection", "err", err)
		return h.renderConnections(w, r, http.StatusBadGateway, "The sign-in failed: "+err.Error())
	}
	if !connections.LocalPath(ret) {
		ret = "/connections"
	}
	http.Redirect(w, r, ret, http.StatusSeeOther)
	return nil
}

// clientMetadata serves the Client ID Metadata Document: Pizza Bot's
// client_id at authorization servers that fetch it.
func (h *Handler) clientMetadata(w http.ResponseWriter, r *http.Request) error {
	if h.conns == nil {
		return notFound
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=3600")
	_, err := w.Write(h.conns.ClientMetadata())
	return err
}

// apiListConnections is the user's connections and the values they
// entered, never a token or a value.
func (h *Handler) apiListConnections(w http.ResponseWriter, r *http.Request) error {
	if h.conns == nil {
		return writeJSON(w, http.StatusOK, map[string]any{"connections": []connections.Connection{}, "secrets": []connections.EnteredSecret{}})
	}
	list, err := h.conns.List(r.Context(), userFrom(r.Context()).ID)
	if err != nil {
		return err
	}
	entered, err := h.conns.EnteredSecrets(r.Context(), userFrom(r.Context()).ID)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"connections": list, "secrets": entered})
}

// secretOf checks that {server} is a configured server that takes the
// ${user:{name}} value: anything else is not found.
func (h *Handler) secretOf(r *http.Request) (server, name string, err error) {
	if h.conns == nil {
		return "", "", errNoConnections
	}
	server, name = r.PathValue("server"), r.PathValue("name")
	srv, err := h.conns.Server(r.Context(), server)
	if err != nil || !slices.Contains(srv.Secrets, name) {
		return "", "", notFound
	}
	return server, name, nil
}

// setSecret enters or replaces the user's value, from the page: waiting
// runs resume (connections.Service.SetSecret tells the runtime), and the
// person goes back to ?return (the thread that waited) or the page.
func (h *Handler) setSecret(w http.ResponseWriter, r *http.Request) error {
	server, name, err := h.secretOf(r)
	if err != nil {
		return err
	}
	value := r.PostFormValue("value")
	if err := connections.CheckSecret(value); err != nil {
		return h.renderConnections(w, r, http.StatusUnprocessableEntity, err.Error())
	}
	if err := h.conns.SetSecret(r.Context(), userFrom(r.Context()).ID, server, name, value); err != nil {
		return err
	}
	ret := r.PostFormValue("return")
	if !connections.LocalPath(ret) {
		ret = "/connections"
	}
	http.Redirect(w, r, ret, http.StatusSeeOther)
	return nil
}

// deleteSecret deletes the user's value, from the page.
func (h *Handler) deleteSecret(w http.ResponseWriter, r *http.Request) error {
	server, name, err := h.secretOf(r)
	if err != nil {
		return err
	}
	if err := h.conns.DeleteSecret(r.Context(), userFrom(r.Context()).ID, server, name); err != nil && !errors.Is(err, db.ErrNotFound) {
		return err
	}
	http.Redirect(w, r, "/connections", http.StatusSeeOther)
	return nil
}

// apiPutSecret enters or replaces the user's value: {"value": "..."}.
func (h *Handler) apiPutSecret(w http.ResponseWriter, r *http.Request) error {
	server, name, err := h.secretOf(r)
	if err != nil {
		return err
	}
	var body struct {
		Value string `json:"value"`
	}
	if err := decodeJSON(w, r, &body); err != nil {
		return err
	}
	if err := connections.CheckSecret(body.Value); err != nil {
		return refusal.New(refusal.Invalid, "value", "%s", err.Error())
	}
	if err := h.conns.SetSecret(r.Context(), userFrom(r.Context()).ID, server, name, body.Value); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// apiDeleteSecret deletes the user's value; 404 when there is none.
func (h *Handler) apiDeleteSecret(w http.ResponseWriter, r *http.Request) error {
	server, name, err := h.secretOf(r)
	if err != nil {
		return err
	}
	if err := h.conns.DeleteSecret(r.Context(), userFrom(r.Context()).ID, server, name); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// apiDeleteConnection revokes and deletes the user's connection to server.
func (h *Handler) apiDeleteConnection(w http.ResponseWriter, r *http.Request) error {
	if h.conns == nil {
		return errNoConnections
	}
	err := h.conns.Disconnect(r.Context(), userFrom(r.Context()).ID, r.PathValue("server"))
	if errors.Is(err, db.ErrNotFound) {
		return err
	}
	if err != nil {
		h.log.WarnContext(r.Context(), "revoke a connection", "server", r.PathValue("server"), "err", err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
