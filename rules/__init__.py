# The built-in rule files live beside this file and ship as package data (triage.rules.builtin).
