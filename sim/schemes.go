package sim

import (
	"fmt"
	"strings"
	"time"

	"github.com/autoshape/autoshape/estimator"
	"github.com/autoshape/autoshape/policies"
)

// SchemeNames lists the standard schemes in table order.
var SchemeNames = []string{"autoshape", "classic", "static90", "unshaped", "oracle"}

// AutorateName is the scheme of CAKE's autorate-ingress alone
// (Scheme.AutorateIngress), known to Schemes but not in the standard table.
const AutorateName = "autorate"

// SuperviseName is the scheme of the budget policy supervising CAKE's
// autorate-ingress on download (policies.Supervise), known to Schemes but
// not in the standard table.
const SuperviseName = "supervise"

// Schemes returns the named standard schemes:
//   - autoshape: the controller with the budget policy;
//   - classic: the controller with cake-autorate's default rules;
//   - static90: a fixed shaper at 90 % of the trace's mean capacity;
//   - unshaped: no shaper at all;
//   - oracle: a shaper at 95 % of the capacity of the coming 50 ms;
//   - autorate: CAKE's autorate-ingress alone (AutorateName);
//   - supervise: the budget policy supervising autorate-ingress (SuperviseName).
func Schemes(names []string, budget policies.BudgetConfig, classic policies.ClassicConfig) ([]Scheme, error) {
	if err := budget.Validate(); err != nil {
		return nil, err
	}
	if _, err := policies.NewClassic(classic); err != nil {
		return nil, err
	}
	var out []Scheme
	for _, n := range names {
		switch n {
		case "autoshape":
			out = append(out, Scheme{Name: n, Policy: func(estimator.Direction, policies.Bounds, float64) (policies.Policy, error) {
				return policies.NewBudget(budget)
			}})
		case "classic":
			out = append(out, Scheme{Name: n, Policy: func(estimator.Direction, policies.Bounds, float64) (policies.Policy, error) {
				return policies.NewClassic(classic)
			}})
		case "static90":
			out = append(out, Scheme{Name: n, Policy: func(_ estimator.Direction, _ policies.Bounds, mean float64) (policies.Policy, error) {
				return policies.NewFixed(0.9 * mean), nil
			}})
		case "unshaped":
			out = append(out, Scheme{Name: n})
		case "oracle":
			out = append(out, Scheme{Name: n, Oracle: &Oracle{Fraction: 0.95, Window: 50 * time.Millisecond}})
		case SuperviseName:
			out = append(out, Scheme{Name: n, Policy: func(estimator.Direction, policies.Bounds, float64) (policies.Policy, error) {
				return policies.NewSupervise(budget)
			}})
		case AutorateName:
			out = append(out, Scheme{Name: n, AutorateIngress: true})
		default:
			return nil, fmt.Errorf("unknown policy %q (known: %s, %s, %s)", n, strings.Join(SchemeNames, ", "), AutorateName, SuperviseName)
		}
	}
	return out, nil
}
