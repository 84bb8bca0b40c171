package views

import (
	"strconv"
	"strings"
	"testing"

	"pizzabot/db"
)

func TestCostChart(t *testing.T) {
	t.Parallel()
	days := []db.UsageRow{
		{Key: "2026-11-01"},
		{Key: "2026-11-02", Cost: 3 * db.Dollar, Calls: 7},
		{Key: "2026-11-03", Cost: 1_000, Calls: 1},
	}
	c := CostChart(days)
	if len(c.Bars) != 3 {
		t.Fatalf("%d bars", len(c.Bars))
	}
	height := func(b ChartBar) float64 {
		f, err := strconv.ParseFloat(b.H, 64)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	if h := height(c.Bars[0]); h != 0 {
		t.Errorf("a day without cost is %v high", h)
	}
	// $3 on a scale up to $5: 60% of the plot.
	if h := height(c.Bars[1]); h != 0.6*chartPlotH {
		t.Errorf("$3 is %v high, want %v", h, 0.6*chartPlotH)
	}
	if h := height(c.Bars[2]); h != chartMinBar {
		t.Errorf("a tiny cost is %v high, want the least visible %v", h, chartMinBar)
	}
	if got := c.Ticks[len(c.Ticks)-1].Label; got != "$5.00" {
		t.Errorf("top tick = %q", got)
	}
	if c.Bars[1].Title != "2026-11-02: $3.00, 7 model calls" {
		t.Errorf("title = %q", c.Bars[1].Title)
	}
	if !strings.Contains(c.Desc, "The costliest day is 2026-11-02 at $3.00.") {
		t.Errorf("desc = %q", c.Desc)
	}
	if got := CostChart([]db.UsageRow{{Key: "2026-11-01"}}); !strings.Contains(got.Desc, "Nothing was spent") || got.Ticks[len(got.Ticks)-1].Label != "$0.01" {
		t.Errorf("empty chart: %q, top %q", got.Desc, got.Ticks[len(got.Ticks)-1].Label)
	}
}

func TestNiceCeiling(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, want db.USD }{
		{1, 1}, {3, 5}, {7, 10}, {10, 10}, {11, 20}, {4_200_000, 5_000_000}, {db.Dollar, db.Dollar}, {2_500_000_000, 5 * db.Dollar},
	} {
		if got := niceCeiling(tt.in); got != tt.want {
			t.Errorf("niceCeiling(%d) = %d, want %d", tt.in, got, tt.want)
		}
	}
}
