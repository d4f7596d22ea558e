package adkgo_test

import (
	"context"
	"fmt"
	"iter"
	"log"

	"google.golang.org/adk/v2/agent"
	"google.golang.org/adk/v2/runner"
	"google.golang.org/adk/v2/session"
	"google.golang.org/genai"

	"github.com/adksession/adksession/service"
	"github.com/adksession/adksession/service/adkgo"
)

// An adk-go runner that keeps its sessions in adksession. Any agent works
// (an llmagent, a workflow); this one is a stand-in without a model.
func Example() {
	ctx := context.Background()
	svc, err := service.Open(ctx, service.Config{RedisURL: "redis://127.0.0.1:6379/0"})
	if err != nil {
		log.Fatal(err)
	}
	defer svc.Close(ctx) // drains the write-behind, when there is one

	r, err := runner.New(runner.Config{
		AppName:           "my-app",
		Agent:             echoAgent(),
		SessionService:    adkgo.New(svc),
		AutoCreateSession: true,
	})
	if err != nil {
		log.Fatal(err)
	}
	msg := genai.NewContentFromText("hello", genai.RoleUser)
	for ev, err := range r.Run(ctx, "user-1", "session-1", msg, agent.RunConfig{}) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(ev.Author, ev.Content.Parts[0].Text)
	}
}

// A runner that does not compact, reading the compacted view of its
// sessions; whatever compacts them, and adk-go's REST server, keep an
// adapter from New, which reads the whole history.
func ExampleNewWithConfig() {
	ctx := context.Background()
	svc, err := service.Open(ctx, service.Config{RedisURL: "redis://127.0.0.1:6379/0"})
	if err != nil {
		log.Fatal(err)
	}
	defer svc.Close(ctx)

	r, err := runner.New(runner.Config{
		AppName:        "my-app",
		Agent:          echoAgent(),
		SessionService: adkgo.NewWithConfig(svc, adkgo.Config{CompactedGets: true}),
	})
	if err != nil {
		log.Fatal(err)
	}
	msg := genai.NewContentFromText("hello again", genai.RoleUser)
	for _, err := range r.Run(ctx, "user-1", "session-1", msg, agent.RunConfig{}) {
		if err != nil {
			log.Fatal(err)
		}
	}
}

// echoAgent answers with the user's text.
func echoAgent() agent.Agent {
	a, err := agent.New(agent.Config{
		Name: "echo",
		Run: func(ctx agent.InvocationContext) iter.Seq2[*session.Event, error] {
			return func(yield func(*session.Event, error) bool) {
				ev := session.NewEvent(ctx, ctx.InvocationID())
				ev.Content = genai.NewContentFromText(ctx.UserContent().Parts[0].Text, genai.RoleModel)
				yield(ev, nil)
			}
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	return a
}
