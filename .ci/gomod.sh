# Sourced by .ci/modcheck and .ci/setversion; Makefile's tidy uses it too.
# Needs only Go and POSIX tools.

# gomods prints the repository's go.mod files, as paths from the root
# (the root's own is "go.mod"): git's list in a checkout, find outside one
# (an unpacked archive).
gomods() {
	if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
		git ls-files go.mod '*/go.mod'
	else
		find . -name go.mod -not -path '*/testdata/*' -not -path '*/.*/*' | sed 's#^\./##' | sort
	fi
}

# modpaths LIST GOMOD prints the module paths of the go.mod's Require list
# (LIST=Require) or of the left sides of its replace lines (LIST=Replace).
# The go command parses the go.mod (`go mod edit -json`, comments and
# blocks as the go command reads them); awk only picks the paths out of
# its indented JSON.
modpaths() {
	GOWORK=off "${GO:-go}" mod edit -json "$2" | awk -F'"' -v list="$1" '
		$2 == list && /\[$/ { inlist = 1; next }
		inlist && /^\t\]/ { inlist = 0; next }
		inlist && $2 == "Old" { old = 1; next }
		inlist && $2 == "Path" && (list == "Require" || old) { print $4; old = 0 }
	'
}
