"""Prompt sets: shipped sets, user files and the public sets (PartiPrompts, MS-COCO)."""
