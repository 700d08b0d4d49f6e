package cli

import (
	"fmt"
	"io"
	"strings"
)

// Fail writes err to w as one line named after the sample, name: err.
// An error that already begins with name and a colon (the connector of
// the same name made it: "rabbitmq: connect to …") is written as it is,
// so that the name does not come twice.
func Fail(w io.Writer, name string, err error) {
	msg := err.Error()
	if !strings.HasPrefix(msg, name+":") {
		msg = name + ": " + msg
	}
	fmt.Fprintln(w, msg)
}
