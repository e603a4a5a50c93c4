package sweep

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/autoshape/autoshape/estimator"
)

// WriteTable prints the steps and the recommendation with the configuration
// lines that use it, and names the directions not completed.
func WriteTable(w io.Writer, out Output, p Plan) {
	rep := out.Report
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "dir\tfraction\trate kbit/s\tgoodput kbit/s\tp50 ms\tp95 ms\tp99 ms\tdrops\t")
	for _, st := range rep.Steps {
		frac, rate := fmt.Sprintf("%.3f", st.Fraction), fmt.Sprintf("%.0f", st.RateKbit)
		if st.RateKbit == 0 {
			frac, rate = "unshaped", "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.0f\t%.1f\t%.1f\t%.1f\t%d\t\n", st.Direction, frac, rate,
			st.GoodputKbit, st.Delay.P50, st.Delay.P95, st.Delay.P99, st.Drops)
	}
	tw.Flush()
	fmt.Fprintf(w, "\nrecommendation: the highest rate whose p95 added delay is within %.0f ms\n", rep.Recommendation.BudgetMs)
directions:
	for _, d := range p.Directions {
		for _, f := range out.Incomplete {
			if f.Direction == d.String() {
				fmt.Fprintf(w, "%s: not completed, no recommendation: %s\n", d, f.Error)
				continue directions
			}
		}
		rec, section := rep.Recommendation.DownKbit, "[link.download]"
		if d == estimator.Up {
			rec, section = rep.Recommendation.UpKbit, "[link.upload]"
		}
		if rec == 0 {
			fmt.Fprintf(w, "%s: no step was within the budget; sweep lower fractions (--from)\n", d)
			continue
		}
		fmt.Fprintf(w, "%s\nbase = %q\nmax = %q   # the line rate\n", section, fmt.Sprintf("%.0fkbit", rec), fmt.Sprintf("%.0fkbit", p.LineRate[d]/1000))
	}
}
