module github.com/polysketch/polysketch

go 1.26
