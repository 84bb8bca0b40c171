package jobs_test

import (
	"context"
	"testing"

	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
)

// TestStartReadsSettingsThroughItsTransaction: a run started while the
// default model is chosen in the settings reads that setting through the
// starting transaction. Reading it through the pool (as serve.go once did
// through DefaultModelFunc) is a second connection asked for while the
// first is held, which deadlocks a busy server; dbtest's pool fails the
// test on it (this test failed so before the runtime read it through its
// transaction).
func TestStartReadsSettingsThroughItsTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t, scriptmodel.Script{Default: &scriptmodel.Reply{Content: "Done."}})
	ctx := context.Background()
	if err := db.SetServerSetting(ctx, b.pool, db.SettingDefaultModel, "compatible:from-settings"); err != nil {
		t.Fatal(err)
	}
	th := b.start(t, "Which model?", "")
	if th.Model != "compatible:from-settings" {
		t.Errorf("model = %q, want the settings' compatible:from-settings", th.Model)
	}
}
