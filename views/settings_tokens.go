package views

import (
	"pizzabot/db"
	"time"
)

// Tokens is the personal access tokens page of the signed-in user.
type Tokens struct {
	Nav    Nav
	Now    time.Time
	Tokens []db.APIToken
	// Name, Expiry and Admin are the new-token form as submitted.
	Name   Field
	Expiry string
	Admin  bool
	// Expiries are the lifetimes a new token can be given, up to the
	// server's maximum (PIZZA_TOKEN_MAX_TTL).
	Expiries []TokenExpiry
	// CanAdmin offers the admin scope: the user is an admin.
	CanAdmin bool
	// Created is the secret of the token just created: shown this once.
	Created     string
	CreatedName string
}

// TokenExpiry is a choice of the new-token form: Value is in days.
type TokenExpiry struct{ Value, Label string }
