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

// backends are the Redis deployments every test here runs against.
var backends = []struct {
	name string
	url  func(testing.TB) string
}{
	{"standalone", testenv.RedisURL},
	{"cluster", testenv.ClusterURL},
}

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
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			url := b.url(t)
			sessiontestsuite.RunServiceTests(t, sessiontestsuite.SuiteOptions{SupportsUserProvidedSessionID: true},
				func(t *testing.T) session.Service {
					return New(openService(t, service.Config{RedisURL: url, Namespace: testenv.UniqueName(t, "adkgo-")}))
				})
		})
	}
}
