package doccheck_test

// vetFlags are the go vet flags of the doc check: no "unreachable code"
// for the uses of a fragment's variables that follow its last return.
var vetFlags = []string{"-unreachable=false"}
