package main

import (
	"context"
	"fmt"

	"github.com/adksession/adksession/service"
)

// openService opens the service the flags name.
func openService(ctx context.Context, cfg service.Config) (*service.Service, error) {
	if cfg.RedisURL == "" {
		return nil, fmt.Errorf("no Redis: give --redis or REDIS_URL")
	}
	svc, err := service.Open(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", redact(cfg.RedisURL), err)
	}
	return svc, nil
}
