package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestReason(t *testing.T) {
	for in, want := range map[string]string{
		`order ord-0000123 breaks rule: amount must be positive`:   `order ord-N breaks rule: amount must be positive`,
		`malformed row "2026-13-01,12.00,EUR": date: out of range`: `malformed row "…": date: out of range`,
		`rates: status 503 after 4 attempts`:                       `rates: status 503 after N attempts`,
		`POST https://api.stripe.com/v1/charges: 500`:              `POST https://api.stripe.com/vN/charges: 500`,
		`GET https://api.github.com/v3/repos: 500`:                 `GET https://api.github.com/vN/repos: 500`,
		`can't parse "a \"quoted\" word"`:                          `can't parse "…"`,
		`unterminated "quote here`:                                 `unterminated "quote here`,
		"decoder: UTF-8\tnot   UTF-16":                             `decoder: UTF-N not UTF-N`,
		`amount 12.50 EUR.`:                                        `amount N EUR.`,
		`open "C:\\data\\ord-17\\": access denied`:                 `open "…": access denied`,
		`bad body {\"id\":1} for "ord-1"`:                          `bad body {\"id\":N} for "…"`,
	} {
		assert.Equal(t, want, reason(in), in)
	}
	assert.NotEqual(t, reason("POST https://api.stripe.com/v1/charges: 500"), reason("GET https://api.github.com/v3/repos: 500"))
}

// Escaped quotes do not open or close: a long error made of JSON with
// escaped quotes keeps its text, numbers aside. (reason reads the text
// once; an earlier version scanned to the end of the text at each of them.)
func TestReasonEscapedQuotes(t *testing.T) {
	long := "400 Bad Request: " + strings.Repeat(`{\"id\":1,\"sku\":\"A\"},`, 10000)
	got := reason(long)
	assert.True(t, strings.HasPrefix(got, `400 Bad Request: {\"id\":N,\"sku\":\"A\"},`), got[:60])
	assert.Equal(t, 10000, strings.Count(got, `\"sku\"`))
}

// A number written with thousands separators is one number: one N.
func TestReasonGroupedNumbers(t *testing.T) {
	for in, want := range map[string]string{
		`limit 1 000 000 exceeded`:      `limit N exceeded`,
		`limit 1 000 000 exceeded by 3`: `limit N exceeded by N`,
		`limit 1,000,000 exceeded`:      `limit N exceeded`,
		`limit 1 000 000.`:              `limit N.`,
		`ids 12 34 failed`:              `ids N N failed`,
		`status 503 404 429`:            `status 503 404 429`,
		`took 1 200 ms`:                 `took N ms`,
	} {
		assert.Equal(t, want, reason(in), in)
	}
}
