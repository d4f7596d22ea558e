package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"
)

// checkExposure refuses, before anything is opened, to serve the API beyond
// loopback without a bearer token, and to put the embedded Redis (which has
// no password) beyond loopback at all, unless --no-auth says that something
// else guards the addresses.
func checkExposure(ctx context.Context, f serveFlags) error {
	if f.noAuth {
		return nil
	}
	if f.authToken == "" {
		err := requireLoopback(ctx, "--addr", f.addr, "refusing to serve on %s without a token: anyone who reaches it could read and write every session; "+
			"set --auth-token (AUTH_TOKEN), listen on loopback (--addr 127.0.0.1:8080), or pass --no-auth when something in front authenticates")
		if err != nil {
			return err
		}
	}
	if f.store.redisURL == "" {
		return requireLoopback(ctx, "--embedded-redis", f.embeddedRedis, "refusing to start the embedded Redis on %s: it has no password and holds every session; "+
			"listen on loopback (--embedded-redis 127.0.0.1:0) or pass --no-auth when something else guards it")
	}
	return nil
}

// requireLoopback returns the refusal (a format with the address) unless
// the listen address of flag binds loopback only.
func requireLoopback(ctx context.Context, flag, addr, refusal string) error {
	local, err := loopbackOnly(ctx, addr)
	if err != nil {
		return fmt.Errorf("%s %s: %w", flag, addr, err)
	}
	if !local {
		return fmt.Errorf(refusal, addr)
	}
	return nil
}

// loopbackOnly reports whether a listen address ("host:port") binds
// loopback only: an empty or unspecified host binds every interface, a name
// counts as loopback when every address it resolves to is.
func loopbackOnly(ctx context.Context, addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, err
	}
	if host == "" {
		return false, nil
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip.Unmap().IsLoopback(), nil
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return false, err
	}
	for _, ip := range ips {
		if !ip.Unmap().IsLoopback() {
			return false, nil
		}
	}
	return len(ips) > 0, nil
}
