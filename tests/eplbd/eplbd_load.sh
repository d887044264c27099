#!/usr/bin/env bash
echo 1..0
