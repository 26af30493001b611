package classify

import (
	"io"
	"mime"
	"mime/multipart"
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
	if len(r.Query["query"]) > 1 {
		op.Class, op.Reason = Unknown, "several query parameters"
		return op
	}
	sql := r.Query.Get("query")
	body := string(r.Body)
	truncated := r.Truncated
	if mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err == nil && strings.HasPrefix(mt, "multipart/") {
		// ClickHouse takes the query from the form's query fields; the
		// other parts are external data.
		form, err := formQueries(body, params["boundary"])
		if err != nil || truncated {
			op.Class, op.Reason = Unknown, "a multipart ClickHouse request guard cannot read"
			return op
		}
		sql, body = sql+"\n"+form, ""
	}
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

// formQueries joins the values of a multipart form's query fields.
func formQueries(body, boundary string) (string, error) {
	mr := multipart.NewReader(strings.NewReader(body), boundary)
	var out []string
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			return strings.Join(out, "\n"), nil
		}
		if err != nil {
			return "", err
		}
		if part.FormName() == "query" {
			b, err := io.ReadAll(io.LimitReader(part, MaxBody))
			if err != nil {
				return "", err
			}
			out = append(out, string(b))
		}
	}
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
	// replaces: REPLACE seen at depth 0 (CREATE OR REPLACE).
	replaces bool
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
	case "REPLACE":
		return Destructive, "REPLACE TABLE replaces a table and its data"
	case "CREATE":
		if st.replaces {
			return Destructive, "CREATE OR REPLACE replaces a table and its data"
		}
	case "ALTER":
		if st.destroys != "" {
			return Destructive, "ALTER ... " + strings.ToUpper(st.destroys) + " destroys data"
		}
		return Write, "ALTER writes"
	}
	return Write, kw + " writes"
}

// Words are ASCII: ClickHouse skips Unicode whitespace (a no-break space
// before DROP), so every other byte separates words here.
func isWordStart(c byte) bool {
	return c == '_' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z')
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
			i = skipBlockComment(text, i)
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
			if depth == 0 && strings.EqualFold(w, "REPLACE") {
				st.replaces = true
			}
			content = true
			i = j
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' || c >= 0x80:
			i++
		default:
			content = true
			i++
		}
	}
	flush()
}

// skipBlockComment returns the index after the /* comment at i; they
// nest in ClickHouse.
func skipBlockComment(text string, i int) int {
	depth := 0
	for i < len(text) {
		switch {
		case strings.HasPrefix(text[i:], "/*"):
			depth++
			i += 2
		case strings.HasPrefix(text[i:], "*/"):
			depth--
			i += 2
			if depth == 0 {
				return i
			}
		default:
			i++
		}
	}
	return len(text)
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
