package adkgo

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/adk/v2/session"
	"google.golang.org/adk/v2/session/sessiontestsuite"

	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
)

// openService opens a Service on cfg with a namespace of its own, closed
// when the test ends.
func openService(t *testing.T, cfg service.Config) *service.Service {
	t.Helper()
	svc, err := service.Open(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, svc.Close(context.Background())) })
	return svc
}

// TestADKGoConformance runs adk-go's own session service suite against
// adkgo.New on real Redis, every setup in a fresh namespace.
func TestADKGoConformance(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, url string) {
		sessiontestsuite.RunServiceTests(t, sessiontestsuite.SuiteOptions{SupportsUserProvidedSessionID: true},
			func(t *testing.T) session.Service {
				return New(openService(t, service.Config{RedisURL: url, Namespace: testenv.UniqueName(t, "adkgo-")}))
			})
	})
}
