// Command mooncake is Mooncake-Go's one CLI: `mooncake master` runs the
// pool's master, `mooncake node` contributes DRAM to a master, and
// `mooncake replay` replays a Mooncake request trace against a pool (the
// main job; with no flags it replays the embedded conversation trace on a
// pool it starts in-process); `mooncake ctl` inspects and administers a
// running master.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// exitError carries an exit status and a one-line message.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func main() {
	root := &cobra.Command{
		Use:           "mooncake",
		Short:         "Mooncake-Go: KV-cache transfer engine and pool",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	// A bad flag is a usage error, exit status 2 like a bad flag value.
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &exitError{2, c.CommandPath() + ": " + err.Error()}
	})
	root.AddCommand(masterCmd(), nodeCmd(), replayCmd(), benchCmd(), infoCmd(), ctlCmd())
	if err := root.Execute(); err != nil {
		var ee *exitError
		if errors.As(err, &ee) {
			fmt.Fprintln(os.Stderr, ee.msg)
			os.Exit(ee.code)
		}
		fmt.Fprintln(os.Stderr, "mooncake:", err)
		os.Exit(1)
	}
}
