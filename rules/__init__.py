# The built-in rule files live here, the one copy; triage/rules/builtin links to this folder so
# the package finds them the same way in a checkout and installed (shipped as package data).
