package views

import (
	"pizzabot/db"
	"time"
)

// Settings is the admin settings page.
type Settings struct {
	Nav Nav
	Now time.Time
	// Notice confirms the change just made ("Saved."); empty otherwise.
	Notice string

	Providers []ProviderRow
	// CanStoreKeys reports whether PIZZA_SECRET_KEY is set, so keys typed
	// in the form can be stored encrypted.
	CanStoreKeys bool

	// DefaultModel is the model chosen here; EnvModel is PIZZA_MODEL, used
	// when DefaultModel is empty.
	DefaultModel Field
	EnvModel     string
	// ModelExamples are "<provider>:<model-id>" suggestions.
	ModelExamples []string
	// ContextWindows are the models' context windows set here, over
	// EnvContextWindows (PIZZA_CONTEXT_WINDOWS) entry by entry.
	ContextWindows    Field
	EnvContextWindows string

	// ToolPolicy is the server's tool policy as stored (JSON), or the
	// admin's refused text with its Error.
	ToolPolicy Field

	Users []db.UserAccount
	// Me is the admin viewing the page (who cannot demote or disable
	// themselves).
	Me int64
	// UserError is a refused user change.
	UserError string

	Skills      []SkillRow
	SkillErrors []SkillLoadError
	// SkillInstallError says why an uploaded skill archive was refused.
	SkillInstallError string
	// SkillsDir is where custom skills are written; empty when the server
	// has no data root to write to.
	SkillsDir string

	// Origins are the origins added here; EnvOrigins come from
	// PIZZA_ALLOWED_ORIGINS and are fixed.
	Origins    []db.AllowedOrigin
	EnvOrigins []string
	NewOrigin  Field

	// JobsUI reports whether River's UI is mounted at /settings/jobs/.
	JobsUI bool

	// Disk is the data root's free space; nil when it is not measured.
	Disk *DiskLine

	Audit []db.AuditEntry
}

// DiskLine is the free space of the data root's file system, formatted,
// and whether it is below the floor under which new runs are refused.
type DiskLine struct {
	Path, Free, Total, Floor string
	Below                    bool
}

// ProviderRow is one model provider's form.
type ProviderRow struct {
	Name  string
	Label string
	// DefaultBaseURL is used when neither BaseURL nor BaseURLEnv is set.
	DefaultBaseURL string
	// BaseURLEnv and KeyEnvDefault are the provider's own variables.
	BaseURLEnv    string
	KeyEnvDefault string
	KeyRequired   bool
	// EnvKeySet reports whether the variable the key is read from now is
	// set (never its value).
	EnvKeySet bool
	BaseURL   Field
	KeyEnv    Field
	// Key is the key field's error; the field itself is always empty.
	Key Field
	// API is the API stored for OpenAI ("responses", "chat"; empty: the
	// environment's), APIEnv what OPENAI_API says.
	API    Field
	APIEnv string
	// KeyStored reports an encrypted key stored for the provider.
	KeyStored bool
	// Configured reports settings stored for the provider.
	Configured bool
	// Test is the result of the provider's Test, when one was asked.
	Test *ProviderTest
}

// ProviderTest is what a provider's Test found: the models its stored
// settings and the environment reach, or what is wrong.
type ProviderTest struct {
	Provider string
	OK       bool
	// Host is the host the client talks to ("" when it could not be
	// built).
	Host string
	// Models are the first model ids, in order; Count is how many there
	// are in all.
	Models []string
	Count  int
	// Problem says what is wrong, when not OK.
	Problem string
}

// More is how many models the list leaves out.
func (t ProviderTest) More() int { return t.Count - len(t.Models) }

// SkillRow is one available skill.
type SkillRow struct {
	Name        string
	Description string
	// Source is "builtin", "plugin", "custom" or "deployment".
	Source string
	// ReplacesBuiltin marks a custom skill hiding a built-in one.
	ReplacesBuiltin bool
	// Missing lists the tools it declares that are not connected.
	Missing []string
	// Needs says in words what it takes to offer the skill
	// (tools.Toolbox.Needs of Missing).
	Needs []string
	// Warnings are the soft rules its SKILL.md breaks; it loads anyway.
	Warnings []string
}

// SkillFileRow is a file of a skill's folder on its page.
type SkillFileRow struct {
	Path string
	Size string
	// Note says what a run can do with it ("JavaScript: runs with run_js").
	Note string
	// Foreign marks a script in a language nothing here runs.
	Foreign bool
}

// SkillLoadError is a skill folder that failed to load, on the settings page.
type SkillLoadError struct {
	Name   string
	Source string
	Error  string
}

// SkillEdit is the form that creates or replaces a custom skill.
type SkillEdit struct {
	Nav Nav
	// Name is the skill's folder name; fixed when editing.
	Name Field
	// Content is SKILL.md.
	Content Field
	// Editing is set when the form replaces an existing custom skill or
	// overrides a built-in one (then Name is fixed).
	Editing bool
	// Builtin is set when Content started as the built-in skill's text.
	Builtin bool
	// Files are the skill's folder (SKILL.md included); saving SKILL.md
	// keeps the others.
	Files          []SkillFileRow
	FilesTruncated bool
	// Warnings are the soft rules the text breaks; ConfirmWarnings asks to
	// save anyway before writing it.
	Warnings        []string
	ConfirmWarnings bool
}
