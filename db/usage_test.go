package db_test

import (
	"errors"
	"testing"

	"pizzabot/db"
)

func TestUSD(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in          db.USD
		text, plain string
	}{
		{0, "$0.00", "0.00"},
		{db.Dollar, "$1.00", "1.00"},
		{12_304_000_000, "$12.30", "12.304"},
		{1_234_567 * db.Dollar, "$1,234,567.00", "1234567.00"},
		{db.Dollar / 100, "$0.01", "0.01"},
		{4_200_000, "$0.0042", "0.0042"},
		{75_000_000, "$0.08", "0.075"},
		{31_000, "$0.000031", "0.000031"},
		{1, "$0.000000001", "0.000000001"},
	} {
		if got := tt.in.String(); got != tt.text {
			t.Errorf("String(%d) = %q, want %q", tt.in, got, tt.text)
		}
		if got := tt.in.Plain(); got != tt.plain {
			t.Errorf("Plain(%d) = %q, want %q", tt.in, got, tt.plain)
		}
		if back, err := db.ParseUSD(tt.plain); err != nil || back != tt.in {
			t.Errorf("ParseUSD(%q) = %d, %v; want %d", tt.plain, back, err, tt.in)
		}
	}
}

func TestParseUSD(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   string
		want db.USD
	}{
		{"5", 5 * db.Dollar},
		{" $5.50 ", 5_500_000_000},
		{"1,250.5", 1_250_500_000_000},
		{".25", 250_000_000},
		{"0.000000001", 1},
	} {
		got, err := db.ParseUSD(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseUSD(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
	for _, in := range []string{"", ".", "-1", "five", "1.2.3", "1e3", "0.0000000001", "99999999999999999999", "$"} {
		if got, err := db.ParseUSD(in); !errors.Is(err, db.ErrAmount) {
			t.Errorf("ParseUSD(%q) = %d, %v; want ErrAmount", in, got, err)
		}
	}
}
