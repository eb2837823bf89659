"""The record of a boot-verify run: the report, its signed summary, what it stands for, releases kept."""
