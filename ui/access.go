package ui

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Sessions and credentials of the board (the package doc says what each
// role sees). A request is authenticated by a session cookie (made by the
// login page from a token) or by an Authorization: Bearer <token> header
// (JSON clients); every page and endpoint but /healthz, /metrics, the login
// page and its style sheet and icon needs one.

// Names on the wire.
const (
	SessionCookie = "tenure_session" // the session cookie
	CSRFHeader    = "X-Tenure-CSRF"  // the CSRF token of the session, on every state-changing request
)

// DefaultSessionTTL is how long a session lasts after its login.
const DefaultSessionTTL = 12 * time.Hour

// maxSessions bounds the sessions kept: the oldest is dropped first.
const maxSessions = 4096

// Errors of the access checks, answered with their status.
var (
	errNoCredential = errors.New("this needs a credential: log in at /login with a board token, or send Authorization: Bearer <token>")
	errCrossSite    = errors.New("cross-site request refused (Origin or Sec-Fetch-Site names another site)")
	errNoOrigin     = errors.New("a state-changing request from a browser session needs an Origin or Sec-Fetch-Site header naming this site")
	errCSRF         = errors.New("missing or wrong CSRF token (" + CSRFHeader + ")")
	errNeedOperator = errors.New("this needs the operator role: log in with an operator token")
)

// principal is who makes a request.
type principal struct {
	role    BoardRole
	session string // the session id, for a cookie session ("" for a bearer token)
}

type principalKey struct{}

// who returns the principal of an authenticated request.
func who(r *http.Request) (principal, bool) {
	p, ok := r.Context().Value(principalKey{}).(principal)
	return p, ok
}

// viewerOnly reports whether the request's principal may not see lease ids
// and payloads.
func viewerOnly(r *http.Request) bool {
	p, ok := who(r)
	return !ok || p.role != Operator
}

type session struct {
	role    BoardRole
	expires time.Time
}

// access holds the tokens the server knows (their SHA-256 only) and the
// live sessions (by the SHA-256 of their id).
type access struct {
	tokens   []tokenSum
	key      [32]byte // the CSRF tokens' HMAC key, new in every process
	ttl      time.Duration
	secure   bool // cookies are Secure even without TLS on this hop
	mu       sync.Mutex
	now      func() time.Time // the clock of the sessions' expiry (under mu)
	sessions map[[32]byte]session
}

type tokenSum struct {
	sum  [32]byte
	role BoardRole
}

func newAccess(tokens []Token, ttl time.Duration, secure bool) (*access, error) {
	if len(tokens) == 0 {
		return nil, errors.New("ui: no board token: the board needs a credential (Config.Tokens; tenure serve makes them in its data directory)")
	}
	a := &access{ttl: ttl, secure: secure, now: time.Now, sessions: make(map[[32]byte]session)}
	if a.ttl <= 0 {
		a.ttl = DefaultSessionTTL
	}
	for _, t := range tokens {
		if pt, err := ParseToken(t.secret); err != nil || pt.Role != t.Role {
			return nil, errors.New("ui: Config.Tokens holds a token not made by NewToken, ParseToken or ReadTokenFile")
		}
		a.tokens = append(a.tokens, tokenSum{t.sum(), t.Role})
	}
	if _, err := rand.Read(a.key[:]); err != nil {
		return nil, err
	}
	return a, nil
}

// tokenRole returns the role of token text s, comparing its SHA-256 with
// every known token's in constant time.
func (a *access) tokenRole(s string) (BoardRole, bool) {
	sum := sha256.Sum256([]byte(strings.TrimSpace(s)))
	var role BoardRole
	for _, t := range a.tokens {
		if subtle.ConstantTimeCompare(sum[:], t.sum[:]) == 1 {
			role = t.role
		}
	}
	return role, role != ""
}

// newSession starts a session of role and returns its id (256 random bits).
func (a *access) newSession(role BoardRole) (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	id := base64.RawURLEncoding.EncodeToString(b[:])
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	for k, s := range a.sessions {
		if now.After(s.expires) {
			delete(a.sessions, k)
		}
	}
	for len(a.sessions) >= maxSessions {
		var oldest [32]byte
		var at time.Time
		for k, s := range a.sessions {
			if at.IsZero() || s.expires.Before(at) {
				oldest, at = k, s.expires
			}
		}
		delete(a.sessions, oldest)
	}
	a.sessions[sha256.Sum256([]byte(id))] = session{role: role, expires: now.Add(a.ttl)}
	return id, nil
}

// session returns the role of live session id.
func (a *access) session(id string) (BoardRole, bool) {
	k := sha256.Sum256([]byte(id))
	a.mu.Lock()
	defer a.mu.Unlock()
	s, ok := a.sessions[k]
	if ok && a.now().After(s.expires) {
		delete(a.sessions, k)
		ok = false
	}
	return s.role, ok
}

// setNow replaces the clock of the sessions' expiry (tests).
func (a *access) setNow(now func() time.Time) {
	a.mu.Lock()
	a.now = now
	a.mu.Unlock()
}

func (a *access) endSession(id string) {
	a.mu.Lock()
	delete(a.sessions, sha256.Sum256([]byte(id)))
	a.mu.Unlock()
}

// csrf is the CSRF token of session id: HMAC-SHA256 of the id under the
// process's key. It is handed to the session's pages by GET /api/config
// (which no other site can read) and must come back in CSRFHeader.
func (a *access) csrf(id string) string {
	m := hmac.New(sha256.New, a.key[:])
	m.Write([]byte("tenure csrf\x00" + id))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// authenticate returns the principal of r: its session cookie's, or its
// bearer token's.
func (a *access) authenticate(r *http.Request) (principal, bool) {
	if c, err := r.Cookie(SessionCookie); err == nil {
		if role, ok := a.session(c.Value); ok {
			return principal{role: role, session: c.Value}, true
		}
	}
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, tok, _ := strings.Cut(h, " ")
		if strings.EqualFold(scheme, "Bearer") {
			if role, ok := a.tokenRole(tok); ok {
				return principal{role: role}, true
			}
		}
	}
	return principal{}, false
}

// sameSite checks that a state-changing request comes from a page of this
// server: Sec-Fetch-Site, when present, says same-origin (or none: the
// user's own navigation); Origin, when present, names this host. A browser
// sends one of them (Origin on every POST), so when the request is a
// browser's (requireHeader: it carries a cookie) their absence is refused
// too, not taken for a same-site request.
func sameSite(r *http.Request, requireHeader bool) error {
	sfs, origin := r.Header.Get("Sec-Fetch-Site"), r.Header.Get("Origin")
	switch sfs {
	case "", "same-origin", "none":
	default:
		return errCrossSite
	}
	if origin != "" {
		o, err := url.Parse(origin)
		if err != nil || o.Host != r.Host || o.Scheme != "http" && o.Scheme != "https" {
			return errCrossSite
		}
	}
	if requireHeader && sfs == "" && origin == "" {
		return errNoOrigin
	}
	return nil
}

// hasSessionCookie reports whether r carries a session cookie, valid or not.
func hasSessionCookie(r *http.Request) bool {
	_, err := r.Cookie(SessionCookie)
	return err == nil
}

// checkUnsafe checks a state-changing request of principal p: from this
// site, and, from a browser (any request with a session cookie), with the
// session's CSRF token. A bearer-token request without a cookie needs no
// CSRF token: a browser never adds an Authorization header to a request
// on its own, and another site's page cannot set one on a request to this
// server without a CORS preflight, which it never grants; its Origin, if
// it has one, is still checked.
func (a *access) checkUnsafe(r *http.Request, p principal) error {
	browser := hasSessionCookie(r)
	if err := sameSite(r, browser); err != nil {
		return err
	}
	if !browser {
		return nil
	}
	if p.session == "" {
		return errCSRF // a cookie, but authenticated by a bearer token: no session to tie a token to
	}
	want := a.csrf(p.session)
	if got := r.Header.Get(CSRFHeader); subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
		return errCSRF
	}
	return nil
}

func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// public are the routes served without a credential.
func public(r *http.Request) bool {
	switch r.URL.Path {
	case "/healthz", "/metrics", "/assets/style.css", "/assets/favicon.svg":
		return safeMethod(r.Method)
	case "/login":
		return true
	}
	return false
}

// operatorOnly are the routes a viewer may not use: audits (their reports
// carry lease ids and input bodies, and one replays the whole log) and
// every state-changing request of the API (the operator actions on a job,
// the bulk operations on a queue's DEAD jobs, and any route added later:
// a viewer changes nothing).
func operatorOnly(r *http.Request) bool {
	return r.URL.Path == "/api/audit" || strings.HasPrefix(r.URL.Path, "/api/") && !safeMethod(r.Method)
}

// isPage reports whether r asks for a page (HTML) rather than the API.
func isPage(r *http.Request) bool {
	return !strings.HasPrefix(r.URL.Path, "/api/") && !strings.HasPrefix(r.URL.Path, "/assets/")
}

// guard authenticates and authorises every request before h: without a
// credential, a redirect to the login page for a page and 401 for the rest
// (the API, the assets but the login page's), 403 for a
// viewer on an operator's route, 403 for a state-changing request that is
// cross-site or, from a browser session, without its CSRF token.
func (s *Server) guard(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if public(r) {
			h.ServeHTTP(w, r)
			return
		}
		p, ok := s.access.authenticate(r)
		if !ok {
			if isPage(r) && safeMethod(r.Method) {
				// A person: to the login form, and back here after it.
				http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="tenure board"`)
			writeError(w, http.StatusUnauthorized, errNoCredential.Error())
			return
		}
		if !safeMethod(r.Method) {
			if err := s.access.checkUnsafe(r, p); err != nil {
				s.log.Warn("ui: request refused", "method", r.Method, "path", r.URL.Path, "err", err)
				writeError(w, http.StatusForbidden, err.Error())
				return
			}
		}
		if p.role != Operator && operatorOnly(r) {
			writeError(w, http.StatusForbidden, errNeedOperator.Error())
			return
		}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
	})
}

var loginTemplate = template.Must(template.New("login").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Tenure · log in</title>
<link rel="icon" href="/assets/favicon.svg" type="image/svg+xml">
<link rel="stylesheet" href="/assets/style.css">
</head>
<body>
<header class="top"><a class="brand" href="/"><img src="/assets/favicon.svg" alt="" width="20" height="20"> Tenure</a></header>
<main id="main" class="login">
<h1>Log in to the board</h1>
{{if .Error}}<p class="error" id="login-error">{{.Error}}</p>{{end}}
<form method="post" action="/login" id="login-form">
<input type="hidden" name="next" value="{{.Next}}">
<p><label for="token">Board token</label><br>
<input type="password" id="token" name="token" size="60" autocomplete="current-password" autofocus required></p>
<p><button class="primary" id="login-submit" type="submit">Log in</button></p>
</form>
<p class="muted small">Paste the contents of a token file: <code>board-operator.token</code> (sees
lease ids and payloads, may use operator actions) or <code>board-viewer.token</code> (read-only, no
lease id, no payload). <code>tenure serve --http</code> makes both in its data directory on its first
start; <code>tenure auth init</code> writes them beside its credentials.</p>
</main>
</body>
</html>
`))

// loginPage answers the login page with status code, an error message (or
// none) and the local path to go to after the login.
func (s *Server) loginPage(w http.ResponseWriter, _ *http.Request, code int, msg, next string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = loginTemplate.Execute(w, struct{ Error, Next string }{msg, localPath(next)})
}

// localPath is next if it is a path of this server, else "/": the login
// sends nobody to another site.
func localPath(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/\\") || strings.HasPrefix(next, "/login") {
		return "/"
	}
	return next
}

// serveLogin is GET /login (the form) and POST /login (token, next): a
// session cookie (HttpOnly, SameSite=Strict, Path=/, Secure over TLS) and a
// redirect to next, or the form again with 401.
func (s *Server) serveLogin(w http.ResponseWriter, r *http.Request) {
	next := r.URL.Query().Get("next")
	if r.Method != http.MethodPost {
		s.loginPage(w, r, http.StatusOK, "", next)
		return
	}
	// No session yet, so no CSRF token: the login must come from this
	// site's own form (an Origin or Sec-Fetch-Site naming it), so that no
	// other site can log a browser in with a token of its choosing.
	if err := sameSite(r, true); err != nil {
		writeError(w, http.StatusForbidden, err.Error())
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4096)
	if err := r.ParseForm(); err != nil {
		s.loginPage(w, r, http.StatusBadRequest, "bad form", "/")
		return
	}
	next = r.PostForm.Get("next")
	role, ok := s.access.tokenRole(r.PostForm.Get("token"))
	if !ok {
		s.log.Warn("ui: login refused: unknown token", "remote", r.RemoteAddr)
		s.loginPage(w, r, http.StatusUnauthorized, "That is not a token of this board.", next)
		return
	}
	id, err := s.access.newSession(role)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "session: "+err.Error())
		return
	}
	http.SetCookie(w, s.sessionCookie(r, id, int(s.access.ttl/time.Second)))
	s.log.Info("ui: login", "role", role, "remote", r.RemoteAddr)
	http.Redirect(w, r, localPath(next), http.StatusSeeOther)
}

// serveLogout is POST /logout: the session ends, its cookie is cleared.
func (s *Server) serveLogout(w http.ResponseWriter, r *http.Request) {
	if p, ok := who(r); ok && p.session != "" {
		s.access.endSession(p.session)
	}
	http.SetCookie(w, s.sessionCookie(r, "", -1))
	writeJSON(w, http.StatusOK, map[string]bool{"logged_out": true})
}

func (s *Server) sessionCookie(r *http.Request, value string, maxAge int) *http.Cookie {
	return &http.Cookie{
		Name: SessionCookie, Value: value, Path: "/", MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil || s.access.secure,
	}
}
