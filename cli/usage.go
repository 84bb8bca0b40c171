package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"

	"pizzabot/client"
	"pizzabot/db"
)

// usageGroups are the groups of a usage report, and the heading of each
// one's column.
var usageGroups = map[string]string{"day": "DAY", "user": "USER", "skill": "SKILL", "model": "MODEL"}

func runUsage(ctx context.Context, x *cmdEnv, args []string) error {
	fs := x.flags()
	var o client.UsageOptions
	fs.StringVar(&o.Group, "group", "day", "day, user, skill or model")
	fs.StringVar(&o.From, "from", "", "the first day, YYYY-MM-DD, a day in the server's time zone, PIZZA_TIMEZONE (default: 29 days before --to)")
	fs.StringVar(&o.To, "to", "", "the last day, YYYY-MM-DD, a day in the server's time zone (default: today there)")
	pos, err := x.parse(args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q", pos[0])
	}
	if _, ok := usageGroups[o.Group]; !ok {
		return usagef("--group %q: want day, user, skill or model", o.Group)
	}
	c, err := x.client()
	if err != nil {
		return err
	}
	rep, err := c.Usage(ctx, o)
	if err != nil {
		return err
	}
	if x.json {
		x.printJSON(rep.Raw)
		return nil
	}
	fmt.Fprintln(x.Stdout, x.paint(bold, fmt.Sprintf("Usage by %s, %s to %s (%s)", rep.Group, rep.From, rep.To, zoneDays(rep.Timezone))))
	if len(rep.Rows) == 0 {
		fmt.Fprintln(x.Stdout, x.paint(dim, "No model calls in these days."))
	} else {
		tw := tabwriter.NewWriter(x.Stdout, 0, 0, 2, ' ', 0)
		// No colour in the table: tabwriter would count its escapes.
		fmt.Fprintln(tw, usageGroups[rep.Group]+"\tCALLS\tTOKENS IN\tTOKENS OUT\tCOST")
		for _, r := range rep.Rows {
			fmt.Fprintln(tw, usageLine(usageName(rep.Group, r.Key, r.Label), r.Calls, r.PromptTokens, r.CompletionTokens, r.CostNanoUSD, r.UnpricedCalls))
		}
		t := rep.Total
		fmt.Fprintln(tw, usageLine("Total", t.Calls, t.PromptTokens, t.CompletionTokens, t.CostNanoUSD, t.UnpricedCalls))
		tw.Flush()
	}
	if len(rep.UnpricedModels) > 0 {
		fmt.Fprintf(x.Stdout, "%s %s: their calls count as $0.00 until an admin prices them (Settings → Usage and budgets).\n",
			x.paint(yellow, "No price:"), strings.Join(rep.UnpricedModels, ", "))
	}
	return nil
}

// zoneDays says whose days a report counts: "UTC days", or "days in
// Europe/Berlin". A server older than the report's timezone field counted
// UTC days.
func zoneDays(zone string) string {
	if zone == "" || zone == "UTC" {
		return "UTC days"
	}
	return "days in " + zone
}

// usageName names a group for people: a user's email (or name), a skill,
// a model, a day.
func usageName(group, key, label string) string {
	switch {
	case label != "":
		return label
	case group == "skill" && key == "":
		return "(no skill)"
	}
	return key
}

// usageLine is one row of the table. The cost is formatted as the usage
// page formats it (db.USD), from the exact amount.
func usageLine(name string, calls, in, out, costNanos, unpriced int64) string {
	cost := db.USD(costNanos).String()
	if unpriced > 0 {
		cost += fmt.Sprintf(" (%d without a price)", unpriced)
	}
	return strings.Join([]string{name, strconv.FormatInt(calls, 10), strconv.FormatInt(in, 10), strconv.FormatInt(out, 10), cost}, "\t")
}
