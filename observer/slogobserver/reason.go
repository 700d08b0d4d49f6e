package slogobserver

import "github.com/sluicehq/sluice/internal/reason"

// MaxReasonLen is the most bytes a reason has, the "…" that marks a cut
// included.
const MaxReasonLen = 200 // reason.MaxLen: TestReasonOfALongQuotedText checks them alike

// Reason returns the short form of err's text that an [Observer] groups
// per-item events by. It is deterministic and depends on the text only:
//
//   - text in double quotes, as %q writes it (backslash escapes included),
//     becomes "…";
//   - a word (a run of letters, digits, '_', '-' and '.', without its
//     trailing dots) that holds a digit becomes #: ids, row numbers,
//     amounts, times and addresses go. The one number kept is the error's
//     status: the StatusCode() int of the first error in err's tree that
//     has that method (the interface the default classifier reads), so
//     that an HTTP 400 and an HTTP 503 stay apart;
//   - every run of white space, new lines included, becomes one space,
//     and the text is trimmed;
//   - the result is cut to [MaxReasonLen] bytes, on a character boundary,
//     ending with "…".
//
// So `row 17: order o-000123: HTTP 503` and `row 18: order o-000124:
// HTTP 503` share the reason `row #: order #: HTTP 503` when 503 is the
// status of the error, and `malformed row "o-7,12.5O,EUR": amount` becomes
// `malformed row "…": amount`. A nil err has the reason "".
func Reason(err error) string {
	if err == nil {
		return ""
	}
	return reason.Of(err.Error(), reason.Status(err))
}
