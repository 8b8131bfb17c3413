"""The gateway's live page (`GET /dashboard`): what it reads (`data`), its last 15 minutes
(`history`), who may see it (`access`), and its static assets (`static/`, shipped as
package data)."""
