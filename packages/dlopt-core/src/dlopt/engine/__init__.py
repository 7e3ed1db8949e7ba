"""(module map written below)"""
