package proxy

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Args is the proxy's command line.
type Args struct {
	Prefill []Prefill // --prefill URL [BOOTSTRAP_PORT], in order
	Decode  []string  // --decode URL, in order
	Host    string    // listen host; default 127.0.0.1
	Port    int       // listen port; default 8000 (0 picks a free one)
}

// ParseArgs reads the command line of upstream's
// mooncake_connector_proxy.py (sequential mode): --prefill URL
// [BOOTSTRAP_PORT] (repeatable; the bootstrap port is the next argument
// when it is a number), --decode URL (repeatable), --host (default
// 127.0.0.1; upstream's default is 0.0.0.0, ours stays local unless asked),
// --port (default 8000). "--flag=value" works too, and single-dash
// spellings. Errors: ErrInvalidArgument naming the bad argument; "-h" or
// "--help" returns ErrHelp.
func ParseArgs(args []string) (Args, error) {
	a := Args{Host: "127.0.0.1", Port: 8000}
	for i := 0; i < len(args); i++ {
		name, val, hasVal := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		if !strings.HasPrefix(args[i], "-") {
			return a, fmt.Errorf("%w: unexpected argument %q", ErrInvalidArgument, args[i])
		}
		if name == "h" || name == "help" {
			return a, ErrHelp
		}
		switch name {
		case "prefill", "decode", "host", "port":
		default:
			return a, fmt.Errorf("%w: unknown flag %q", ErrInvalidArgument, args[i])
		}
		if !hasVal {
			if i+1 >= len(args) || strings.HasPrefix(args[i+1], "-") {
				return a, fmt.Errorf("%w: %s needs a value", ErrInvalidArgument, args[i])
			}
			i++
			val = args[i]
		}
		switch name {
		case "prefill":
			pf := Prefill{URL: val}
			if i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
				port, err := strconv.Atoi(args[i+1])
				if err != nil || port < 1 || port > 65535 {
					return a, fmt.Errorf("%w: --prefill %s: bootstrap port %q", ErrInvalidArgument, val, args[i+1])
				}
				pf.BootstrapPort = port
				i++
			}
			a.Prefill = append(a.Prefill, pf)
		case "decode":
			a.Decode = append(a.Decode, val)
		case "host":
			a.Host = val
		case "port":
			p, err := strconv.Atoi(val)
			if err != nil || p < 0 || p > 65535 {
				return a, fmt.Errorf("%w: --port %q", ErrInvalidArgument, val)
			}
			a.Port = p
		}
	}
	if len(a.Prefill) == 0 || len(a.Decode) == 0 {
		return a, fmt.Errorf("%w: need at least one --prefill URL and one --decode URL", ErrInvalidArgument)
	}
	return a, nil
}

// ErrHelp is returned by ParseArgs for -h / --help.
var ErrHelp = errors.New("proxy: help requested")

// Usage is the command line summary.
const Usage = `usage: proxy --prefill URL [BOOTSTRAP_PORT] [--prefill ...] --decode URL [--decode ...] [--host 127.0.0.1] [--port 8000]

Routes each OpenAI /v1/completions and /v1/chat/completions request through a
prefill instance (max_tokens=1, kv_transfer_params do_remote_decode) and then a
decode instance (with the prefill's kv_transfer_params), round robin; GET
/health and /healthcheck. BOOTSTRAP_PORT (default 8998) is the prefill's
bootstrap server port, used when its answer carries no kv_transfer_params.
`
