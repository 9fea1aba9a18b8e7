"""Views of rl runs (to be filled in)."""

from fastapi import APIRouter

router = APIRouter()
