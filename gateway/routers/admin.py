"""Cache admin API (placeholder until the cache helper lands it)."""

from fastapi import APIRouter

router = APIRouter(prefix="/admin", tags=["admin"])
