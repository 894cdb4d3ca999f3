package statuspage

import (
	"embed"
	"fmt"
	"html/template"
	"io"
	"strings"
	"time"
)

//go:embed assets
var assets embed.FS

// page is the parsed template; templates are read-only once parsed.
var page = template.Must(template.New("status.html").Funcs(template.FuncMap{
	"rate": func(v float64) string { return fmt.Sprintf("%.1f", v) },
	"pct": func(done, total int) int {
		if total <= 0 {
			return 0
		}
		return min(100, done*100/total)
	},
	"stylesheet": stylesheet,
	"period":     period,
	"limit":      limit,
	"chart":      chart,
}).ParseFS(assets, "assets/status.html"))

// Page is everything the status page shows, as one node sees it.
type Page struct {
	// NodeID answered; ClusterID is the cluster's ID as it records it.
	NodeID, ClusterID string
	// MetaLeader is the meta group's leader ("" when there is none).
	MetaLeader string
	// MapEpoch is the shard map's epoch (0 without one).
	MapEpoch    uint64
	GeneratedAt time.Time
	// Refresh is how often the browser reloads the page (0: never).
	Refresh  time.Duration
	Members  []Member
	Groups   []Group
	Plans    []Plan
	Policies []Policy
	HotKeys  []HotKey
	// Problems are what the node could not find out (shown on top).
	Problems []string
}

// Member is one member of the cluster.
type Member struct {
	ID, APIAddr, Suffrage string
	// Role in the meta group; Healthy and Health say whether the member
	// answered, has a meta leader and no damaged or failing replica.
	Role    string
	Healthy bool
	Health  string
	// Applied is the member's last applied index of the meta group;
	// GroupsLed and GroupsHosted count its replicas.
	Applied                 uint64
	GroupsLed, GroupsHosted int
	Keys                    uint64
	// LocalDecisions are the requests the member allowed from the budget
	// leases it holds for callers without the Go client; GrantsHeld those
	// leases now, UnitsWasted their units it left unspent.
	LocalDecisions, GrantsHeld, UnitsWasted uint64
}

// Group is one Raft group: the meta group (0) or a data group.
type Group struct {
	ID       uint32
	Leader   string // "" when no replica knows one
	Replicas []string
	Slots    uint32
	Ranges   string // e.g. "[0,8192) [12288,16384)"
	Keys     uint64
	Forming  bool
}

// Plan is one plan with its progress.
type Plan struct {
	ID               uint64
	Kind, Summary    string
	State, Error     string
	StepsDone, Steps int
	Current          string // the step in progress, if any
	Age              time.Duration
}

// Policy is one policy with its version and the decision rates of the
// members that answered (each counts the decisions of the groups it led).
type Policy struct {
	Name, Algorithm string
	Limit           int64
	Period          time.Duration
	Burst           int64  // token buckets: 0 means Limit
	Calendar        string // quotas: "day", "week", "month" or "year"
	Version         uint64
	Shadow          bool
	Decisions       uint64
	Denied          uint64
	DecisionsPerSec float64
	DeniedPerSec    float64
	// DecisionsByMinute and DeniedByMinute are the decisions and denials
	// of the last minutes, the current one last (chart.go).
	DecisionsByMinute, DeniedByMinute []uint64
}

// HotKey is one of the heaviest keys of a group.
type HotKey struct {
	Group        uint32
	Policy, Key  string
	Count, Error uint64
}

// Render writes p as an HTML document.
func Render(w io.Writer, p *Page) error {
	return page.Execute(w, p)
}

// period writes d without its zero tails: 1m, not 1m0s.
func period(d time.Duration) string {
	s := d.String()
	for _, zero := range []string{"0s", "0m"} {
		if t := strings.TrimSuffix(s, zero); t != s && t != "" && strings.ContainsAny(t[len(t)-1:], "hm") {
			s = t
		}
	}
	return s
}

// stylesheet is the page's embedded stylesheet, inlined by the template.
func stylesheet() template.CSS {
	b, err := assets.ReadFile("assets/status.css")
	if err != nil {
		panic(err) // embedded at build time
	}
	return template.CSS(b)
}
