package classify

import (
	"strings"
	"unicode"
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
	if sql != "" && body != "" {
		if first := statements(sql); len(first) > 0 && leadingKeyword(first[0]) == "INSERT" {
			body, truncated = "", false // the body is the rows being inserted
		}
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

// SQL classifies ClickHouse SQL text, statement by statement.
func SQL(text string) (Class, string) {
	stmts := statements(text)
	if len(stmts) == 0 {
		return Unknown, "no SQL statement is visible"
	}
	class, why := Read, ""
	for _, s := range stmts {
		c, w := sqlStatement(s)
		if worst(class, c) != class || why == "" {
			class, why = worst(class, c), w
		}
	}
	return class, why
}

func sqlStatement(s string) (Class, string) {
	kw := leadingKeyword(s)
	if kw == "" {
		return Unknown, "a statement that does not start with a keyword"
	}
	words := topLevelWords(s)
	if kw == "WITH" {
		// WITH ... SELECT reads; WITH ahead of anything else is that thing.
		for i, w := range words {
			switch w {
			case "SELECT", "INSERT", "ALTER", "DELETE", "UPDATE", "DROP", "TRUNCATE", "CREATE":
				return sqlWords(w, words[i:])
			}
		}
		return Unknown, "a WITH clause without a statement after it"
	}
	return sqlWords(kw, words)
}

// sqlWords classifies a statement by its keyword and its top-level words.
func sqlWords(kw string, words []string) (Class, string) {
	switch kw {
	case "SELECT", "SHOW", "DESCRIBE", "DESC", "EXISTS", "EXPLAIN":
		return Read, kw + " reads"
	case "DROP", "TRUNCATE", "DELETE":
		return Destructive, kw + " destroys data"
	case "ALTER":
		for _, w := range words {
			if w == "DELETE" || w == "DROP" || w == "CLEAR" {
				return Destructive, "ALTER ... " + w + " destroys data"
			}
		}
		return Write, "ALTER writes"
	}
	return Write, kw + " writes"
}

// statements splits SQL on semicolons outside strings, quoted names and
// comments, dropping empty ones.
func statements(text string) []string {
	var out []string
	start := 0
	emit := func(end int) {
		if s := text[start:end]; strings.TrimSpace(stripComments(s)) != "" {
			out = append(out, s)
		}
	}
	for i := 0; i < len(text); {
		switch c := text[i]; {
		case c == '\'' || c == '"' || c == '`':
			i = skipQuoted(text, i)
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
			emit(i)
			i++
			start = i
		default:
			i++
		}
	}
	emit(len(text))
	return out
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

// stripComments blanks comments (outside strings).
func stripComments(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		switch c := s[i]; {
		case c == '\'' || c == '"' || c == '`':
			j := skipQuoted(s, i)
			b.WriteString(s[i:j])
			i = j
		case c == '-' && i+1 < len(s) && s[i+1] == '-', c == '#':
			for i < len(s) && s[i] != '\n' {
				i++
			}
			b.WriteByte(' ')
		case c == '/' && i+1 < len(s) && s[i+1] == '*':
			if j := strings.Index(s[i+2:], "*/"); j >= 0 {
				i += j + 4
			} else {
				i = len(s)
			}
			b.WriteByte(' ')
		default:
			b.WriteByte(c)
			i++
		}
	}
	return b.String()
}

// leadingKeyword is a statement's first word, upper-case, after comments
// and opening parentheses.
func leadingKeyword(s string) string {
	s = strings.TrimLeftFunc(stripComments(s), func(r rune) bool { return unicode.IsSpace(r) || r == '(' })
	end := strings.IndexFunc(s, func(r rune) bool { return !(unicode.IsLetter(r) || r == '_') })
	if end < 0 {
		end = len(s)
	}
	return strings.ToUpper(s[:end])
}

// topLevelWords are a statement's words outside strings, comments and
// parentheses, upper-case.
func topLevelWords(s string) []string {
	s = stripComments(s)
	var words []string
	depth := 0
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\'' || c == '"' || c == '`':
			i = skipQuoted(s, i)
		case c == '(':
			depth++
			i++
		case c == ')':
			depth = max(depth-1, 0)
			i++
		case unicode.IsLetter(rune(c)) || c == '_':
			j := i
			for j < len(s) && (unicode.IsLetter(rune(s[j])) || unicode.IsDigit(rune(s[j])) || s[j] == '_') {
				j++
			}
			if depth == 0 {
				words = append(words, strings.ToUpper(s[i:j]))
			}
			i = j
		default:
			i++
		}
	}
	return words
}
