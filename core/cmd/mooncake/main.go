// Command mooncake is Mooncake-Go's one CLI: `mooncake master` runs the
// pool's master, `mooncake node` contributes DRAM to a master,
// `mooncake metadata-server` runs a standalone HTTP metadata server, and
// `mooncake replay` replays a Mooncake request trace against a pool (the
// main job; with no flags it replays the embedded conversation trace on a
// pool it starts in-process); `mooncake ctl` inspects and administers a
// running master.
package main

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/mooncake-go/mooncake/core/store/client"
)

// exitError carries an exit status and a one-line message. Every command
// uses the same two statuses:
//
//   - 2, a usage error: the command line asks for something invalid or
//     impossible here (an unknown command or flag, a malformed or
//     out-of-range value, contradicting flags, an input it names that is
//     missing, malformed or empty, a size this machine's memory cannot
//     hold); nothing was started.
//   - 1, a runtime error: the command line was fine but running it failed
//     (the master cannot be reached or refused the operation, a port is
//     taken, a transfer failed, a replay stored too little).
type exitError struct {
	code int
	msg  string
}

// masterExit is a failed master call of cmd ("ctl stat", "node") as a
// runtime error: "mooncake CMD: cannot reach master ADDR: connection
// refused" when the master at addr was not reached (client.MasterError),
// else the error on one line.
func masterExit(cmd, addr string, err error) error {
	return &exitError{1, "mooncake " + cmd + ": " + client.MasterError(addr, err)}
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
	root.AddCommand(masterCmd(), nodeCmd(), metadataServerCmd(), replayCmd(), benchCmd(), infoCmd(), ctlCmd(), installPluginCmd(), p2pCmd())
	root.Version = version()
	// Upstream's flags use underscores (--metadata_server), some of ours
	// dashes (--segment-size): either spelling works for every flag.
	root.SetGlobalNormalizationFunc(func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
		return pflag.NormalizedName(strings.ReplaceAll(name, "-", "_"))
	})
	root.Args = cobra.NoArgs // "mooncake bogus": unknown command, exit status 2
	root.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
	usageArgs(root)
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

// usageArgs makes every command's argument errors (a stray argument, an
// unknown subcommand, a wrong count) usage errors, exit status 2, as a bad
// flag is.
func usageArgs(c *cobra.Command) {
	if check := c.Args; check != nil {
		c.Args = func(cmd *cobra.Command, args []string) error {
			if err := check(cmd, args); err != nil {
				var ee *exitError
				if errors.As(err, &ee) {
					return err
				}
				return &exitError{2, cmd.CommandPath() + ": " + err.Error()}
			}
			return nil
		}
	}
	for _, sub := range c.Commands() {
		usageArgs(sub)
	}
}

// version is this build's module version and VCS revision, for --version.
func version() string {
	v := "(devel)"
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	if info.Main.Version != "" {
		v = info.Main.Version
	}
	var rev, dirty string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev != "" {
		v += " " + rev + dirty
	}
	return v + " " + info.GoVersion
}
