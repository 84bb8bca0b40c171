package e2e

import (
	"encoding/json"
	"slices"
	"testing"

	"pizzabot/db/dbtest"
)

// inbox -q searches through the API's q: stemmed English and Russian,
// Chinese by substring, nothing for a word no thread holds.
func TestClientInboxSearch(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	addr := freeAddr(t)
	srv := startServe(t, bin, "DATABASE_URL="+dbtest.NewURL(t), "PIZZA_MODEL=compatible:scripted",
		"COMPATIBLE_BASE_URL="+clerkModel(t), "PIZZA_DATA_ROOT="+clerkRoot(t), "PIZZA_ADDR="+addr)
	waitReady(t, addr, srv)
	c := baseClient(t, bin).with("PIZZA_URL=http://" + addr)
	for _, prompt := range []string{"Write the research briefs", "Проверь продление договоров", "请检查续约合同"} {
		startWaiting(t, c, prompt)
	}
	for q, want := range map[string][]string{
		"researching": {"Write the research briefs"},
		"договор":     {"Проверь продление договоров"},
		"合同":          {"请检查续约合同"},
		"pineapple":   nil,
	} {
		out, _ := c.must(0, "inbox", "-q", q, "--json")
		var list struct {
			Threads []struct {
				Title   string  `json:"title"`
				Snippet *string `json:"snippet"`
			} `json:"threads"`
		}
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			t.Fatalf("inbox -q %s --json: %v\n%s", q, err, out)
		}
		var got []string
		for _, th := range list.Threads {
			got = append(got, th.Title)
			if th.Snippet == nil {
				t.Errorf("inbox -q %s: %q has no snippet", q, th.Title)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("inbox -q %s = %q, want %q", q, got, want)
		}
	}
}
