"""The gateway's live page (`GET /dashboard`): what it reads (`data`), who may see it
(`access`), and its static assets (`static/`, shipped as package data)."""
