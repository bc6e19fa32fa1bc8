package transfer

import "net"

// LANAddress is the first non-loopback IPv4 address of this host, or
// 127.0.0.1 when there is none. Transports bound to every interface publish
// it as ip_or_host_name (upstream also publishes the first LAN address).
func LANAddress() string {
	addrs, err := net.InterfaceAddrs()
	if err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
				return n.IP.String()
			}
		}
	}
	return "127.0.0.1"
}
