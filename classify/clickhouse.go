package classify

import (
	"strings"
)

// ClickHouse classifies a request to ClickHouse's HTTP interface by its
// SQL: the query= parameter followed by the body (unless the query is an
// INSERT, whose body is data). Each statement is classified by its leading
// keyword, after comments and opening parentheses: SELECT, SHOW,
// DESCRIBE, EXISTS, EXPLAIN and WITH...SELECT read; DROP, TRUNCATE,
// DELETE, and ALTER with DELETE, DROP or CLEAR destroy; the rest write.
// Several statements take the worst; no visible SQL is unknown.
func ClickHouse(r *Request) Operation {
	op := Operation{}
	switch r.Path {
	case "/ping", "/replicas_status", "/play", "/dashboard":
		op.Class, op.Reason = Read, "a ClickHouse status page"
		return op
	}
	sql := r.Query.Get("query")
	body := string(r.Body)
	truncated := r.Truncated
	if sql != "" && body != "" && firstKeyword(sql) == "INSERT" {
		body, truncated = "", false // the body is the rows being inserted
	}
	if body != "" {
		sql += "\n" + body
	}
	op.Class, op.Reason = SQL(sql)
	if truncated {
		op.Class, op.Reason = worst(op.Class, Unknown), op.Reason+"; the rest of the body was not read"
	}
	op.Detail = strings.TrimSpace(sql)
	if op.Detail == "" {
		op.Detail = r.Method + " " + r.Path
	}
	return op
}

// SQL classifies ClickHouse SQL text, statement by statement, in one pass
// that allocates nothing per word.
func SQL(text string) (Class, string) {
	class, why, n := Read, "", 0
	scanStatements(text, func(st stmt) {
		n++
		c, w := st.classify()
		if worst(class, c) != class || why == "" {
			class, why = worst(class, c), w
		}
	})
	if n == 0 {
		return Unknown, "no SQL statement is visible"
	}
	return class, why
}

// stmt is what classifying a statement needs of it.
type stmt struct {
	first string // the first word, at any depth ("(SELECT ...)")
	// main is, after a leading WITH, the first statement keyword at depth 0.
	main string
	// destroys is DELETE, DROP or CLEAR seen at depth 0.
	destroys string
}

var sqlMain = []string{"SELECT", "INSERT", "ALTER", "DELETE", "UPDATE", "DROP", "TRUNCATE", "CREATE"}

func (st stmt) classify() (Class, string) {
	kw := strings.ToUpper(st.first)
	if kw == "" {
		return Unknown, "a statement that does not start with a keyword"
	}
	if kw == "WITH" {
		if st.main == "" {
			return Unknown, "a WITH clause without a statement after it"
		}
		kw = strings.ToUpper(st.main)
	}
	switch kw {
	case "SELECT", "SHOW", "DESCRIBE", "DESC", "EXISTS", "EXPLAIN":
		return Read, kw + " reads"
	case "DROP", "TRUNCATE", "DELETE":
		return Destructive, kw + " destroys data"
	case "ALTER":
		if st.destroys != "" {
			return Destructive, "ALTER ... " + strings.ToUpper(st.destroys) + " destroys data"
		}
		return Write, "ALTER writes"
	}
	return Write, kw + " writes"
}

func isWordStart(c byte) bool {
	return c == '_' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || c >= 0x80
}

func isWordByte(c byte) bool { return isWordStart(c) || ('0' <= c && c <= '9') }

// scanStatements calls fn for each non-empty statement: split on
// semicolons outside strings, quoted names and comments (--, #, /* */),
// with its first word and its depth-0 words of interest.
func scanStatements(text string, fn func(stmt)) {
	var st stmt
	content, depth := false, 0
	flush := func() {
		if content {
			fn(st)
		}
		st, content, depth = stmt{}, false, 0
	}
	for i := 0; i < len(text); {
		c := text[i]
		switch {
		case c == '\'' || c == '"' || c == '`':
			i = skipQuoted(text, i)
			content = true
		case c == '-' && i+1 < len(text) && text[i+1] == '-', c == '#':
			for i < len(text) && text[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(text) && text[i+1] == '*':
			if j := strings.Index(text[i+2:], "*/"); j >= 0 {
				i += j + 4
			} else {
				i = len(text)
			}
		case c == ';':
			flush()
			i++
		case c == '(':
			depth++
			i++
		case c == ')':
			depth = max(depth-1, 0)
			content = true
			i++
		case isWordStart(c):
			j := i + 1
			for j < len(text) && isWordByte(text[j]) {
				j++
			}
			w := text[i:j]
			switch {
			case st.first == "" && !content:
				st.first = w
			case depth == 0 && st.main == "" && strings.EqualFold(st.first, "WITH"):
				for _, m := range sqlMain {
					if strings.EqualFold(w, m) {
						st.main = w
						break
					}
				}
			}
			if depth == 0 && st.destroys == "" && (strings.EqualFold(w, "DELETE") || strings.EqualFold(w, "DROP") || strings.EqualFold(w, "CLEAR")) {
				st.destroys = w
			}
			content = true
			i = j
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		default:
			content = true
			i++
		}
	}
	flush()
}

// skipQuoted returns the index after the quoted run starting at i; a
// backslash escapes, and a doubled quote is one quote.
func skipQuoted(text string, i int) int {
	q := text[i]
	for i++; i < len(text); i++ {
		switch text[i] {
		case '\\':
			i++
		case q:
			if i+1 < len(text) && text[i+1] == q {
				i++
				continue
			}
			return i + 1
		}
	}
	return len(text)
}

// firstKeyword is the first statement's leading word, upper-case.
func firstKeyword(text string) string {
	kw := ""
	done := false
	scanStatements(text, func(st stmt) {
		if !done {
			kw, done = strings.ToUpper(st.first), true
		}
	})
	return kw
}
