package results

import (
	"strings"
	"unicode/utf8"
)

// TextWidth is the terminal width the text reports fit by default: a
// 100-column terminal shows every line whole. Wider layouts are asked for
// with a larger width (a wider terminal, or --wide for no limit).
const TextWidth = 100

// column is one column of a text table: its header, whether it is
// left-aligned (names) or right-aligned (numbers), the width it gets when
// the table has room (so that tables of different runs line up), and a
// group: columns of one nonzero group (the percentiles) share one width.
type column struct {
	head  string
	left  bool
	roomy int
	group int
}

// layoutTable renders header and rows as aligned lines of at most width
// runes (width <= 0: no limit). Columns are separated by sep. When the
// roomy widths do not fit, the other columns shrink to their widest cell,
// then the first; when even that does not fit, a first-column cell too
// long for what is left goes on a line of its own, its numbers on the
// next. A table whose other
// columns alone exceed width is printed at its narrowest: callers split
// such tables (see splitColumns).
func layoutTable(cols []column, rows [][]string, width int, sep string) []string {
	need := make([]int, len(cols))
	for i, c := range cols {
		need[i] = utf8.RuneCountInString(c.head)
	}
	for _, r := range rows {
		for i, c := range r {
			need[i] = max(need[i], utf8.RuneCountInString(c))
		}
	}
	for i, c := range cols {
		for j, o := range cols {
			if c.group != 0 && o.group == c.group {
				need[i] = max(need[i], need[j])
			}
		}
	}
	total := func(w []int) int {
		t := utf8.RuneCountInString(sep) * (len(w) - 1)
		for _, x := range w {
			t += x
		}
		return t
	}
	widths := make([]int, len(cols))
	for i, c := range cols {
		widths[i] = max(need[i], c.roomy)
	}
	if width > 0 && total(widths) > width {
		copy(widths[1:], need[1:])
	}
	if width > 0 && total(widths) > width {
		widths[0] = need[0]
	}
	first := widths[0]
	if width > 0 && total(widths) > width {
		widths[0] = max(utf8.RuneCountInString(cols[0].head), width-(total(widths)-widths[0]))
	}
	line := func(cells []string) string {
		var b strings.Builder
		for i, c := range cells {
			if i > 0 {
				b.WriteString(sep)
			}
			pad := strings.Repeat(" ", max(0, widths[i]-utf8.RuneCountInString(c)))
			if cols[i].left {
				b.WriteString(c + pad)
			} else {
				b.WriteString(pad + c)
			}
		}
		return strings.TrimRight(b.String(), " ")
	}
	heads := make([]string, len(cols))
	for i, c := range cols {
		heads[i] = c.head
	}
	out := []string{line(heads)}
	for _, r := range rows {
		if widths[0] < first && utf8.RuneCountInString(r[0]) > widths[0] {
			out = append(out, r[0])
			r = append([]string{""}, r[1:]...)
		}
		out = append(out, line(r))
	}
	return out
}

// tableWidth is the width layoutTable's lines take at their narrowest,
// with sep between columns.
func tableWidth(cols []column, rows [][]string, sep string) int {
	lines := layoutTable(cols, rows, 1, sep)
	w := 0
	for _, l := range lines {
		w = max(w, utf8.RuneCountInString(l))
	}
	return w
}

// splitColumns returns the columns (and rows) before split, and column 0
// with the columns from split on: a table too wide for the terminal
// printed as two, each keyed by its first column.
func splitColumns(cols []column, rows [][]string, split int) (aCols []column, aRows [][]string, bCols []column, bRows [][]string) {
	aCols = cols[:split]
	bCols = append([]column{cols[0]}, cols[split:]...)
	for _, r := range rows {
		aRows = append(aRows, r[:split])
		bRows = append(bRows, append([]string{r[0]}, r[split:]...))
	}
	return aCols, aRows, bCols, bRows
}
