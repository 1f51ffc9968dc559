package leader

import (
	"strings"
	"testing"
	"time"
)

func TestLeaderOptionsValidate(t *testing.T) {
	valid := Options{Enabled: true, LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second, ResourceName: "x"}
	for name, tc := range map[string]struct {
		mut  func(*Options)
		want string // "" for valid
	}{
		"defaults": {func(*Options) {}, ""},
		"sub-second renew and retry": {func(l *Options) {
			l.LeaseDuration, l.RenewDeadline, l.RetryPeriod = time.Second, 900*time.Millisecond, 100*time.Millisecond
		}, ""},
		"lease under a second": {func(l *Options) {
			l.LeaseDuration, l.RenewDeadline, l.RetryPeriod = 900*time.Millisecond, 500*time.Millisecond, 100*time.Millisecond
		}, "must be a whole number of seconds"},
		"fractional lease": {func(l *Options) {
			l.LeaseDuration, l.RenewDeadline, l.RetryPeriod = 1500*time.Millisecond, time.Second, 200*time.Millisecond
		}, "(use 2s)"},
		"lease not above renew":        {func(l *Options) { l.RenewDeadline = 15 * time.Second }, "must be greater than --leader-elect-renew-deadline"},
		"renew not above 1.2 x retry":  {func(l *Options) { l.RetryPeriod = 9 * time.Second }, "1.2 x --leader-elect-retry-period"},
		"zero":                         {func(l *Options) { l.RetryPeriod = 0 }, "must all be positive"},
		"empty name":                   {func(l *Options) { l.ResourceName = "" }, "must not be empty"},
		"not checked when not enabled": {func(l *Options) { l.Enabled, l.LeaseDuration = false, 900*time.Millisecond }, ""},
	} {
		t.Run(name, func(t *testing.T) {
			l := valid
			tc.mut(&l)
			err := l.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Validate() = %v, want valid", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Validate() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
